package gridfs

import "go.mongodb.org/mongo-driver/v2/bson"

// The layout of GridFS's two collections, as Disbatch and the drivers
// write them, in one place: every read of a files or a chunks document
// goes through these. Each field is kept as its raw value and read
// leniently (a field missing or of another type reads as its zero
// value), so that a document another writer made is read as far as it
// can be; Reader checks what a read needs (a chunk's n and data, the
// length the chunks must add up to).

// filesDoc is a document of <prefix>.files.
type filesDoc struct {
	ID       bson.RawValue `bson:"_id"`
	Filename bson.RawValue `bson:"filename"`
	Length   bson.RawValue `bson:"length"`
	MD5      bson.RawValue `bson:"md5"`
	Metadata bson.RawValue `bson:"metadata"`
}

// chunkDoc is a document of <prefix>.chunks.
type chunkDoc struct {
	N    bson.RawValue `bson:"n"`
	Data bson.RawValue `bson:"data"`
}

// decodeFile reads a files document into a File.
func decodeFile(raw bson.Raw) File {
	var d filesDoc
	_ = bson.Unmarshal(raw, &d) // fields are raw values: nothing to fail on
	var f File
	f.ID, _ = d.ID.ObjectIDOK()
	f.Filename, _ = d.Filename.StringValueOK()
	f.Length, _ = d.Length.AsInt64OK()
	f.MD5, _ = d.MD5.StringValueOK()
	f.Metadata, _ = d.Metadata.DocumentOK()
	return f
}

// decodeFileID is a files document's _id, whatever its type.
func decodeFileID(raw bson.Raw) bson.RawValue {
	var d filesDoc
	_ = bson.Unmarshal(raw, &d)
	return d.ID
}

// decodeChunk reads a chunks document.
func decodeChunk(raw bson.Raw) chunkDoc {
	var c chunkDoc
	_ = bson.Unmarshal(raw, &c)
	return c
}
