package gridfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ErrNotFound is returned when a file has no files document.
var ErrNotFound = errors.New("gridfs: file not found")

// File describes a stored file.
type File struct {
	ID       bson.ObjectID
	Filename string
	Length   int64
	MD5      string
	Metadata bson.Raw
}

// Reader reads a file's chunks in order, one at a time.
type Reader struct {
	File
	ctx  context.Context
	cur  *mongo.Cursor
	next int32
	buf  []byte
	read int64
	err  error
}

// Open returns a reader of the file with the given _id. Close it.
func (b *Bucket) Open(ctx context.Context, id bson.ObjectID) (*Reader, error) {
	raw, err := b.files.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id.Hex())
	}
	if err != nil {
		return nil, fmt.Errorf("gridfs: read files document %s: %w", id.Hex(), err)
	}
	f := decodeFile(raw)
	f.ID = id
	// Small batches: a reader holds a few chunks at a time, whatever the
	// file's size (and FerretDB does not cap its batches by bytes).
	cur, err := b.chunks.Find(ctx, bson.D{{Key: "files_id", Value: id}},
		options.Find().SetSort(bson.D{{Key: "n", Value: 1}}).SetBatchSize(8))
	if err != nil {
		return nil, fmt.Errorf("gridfs: read chunks of %s: %w", id.Hex(), err)
	}
	return &Reader{File: f, ctx: ctx, cur: cur}, nil
}

// Read implements io.Reader. It fails if a chunk is missing, out of order
// or of a type that is neither String nor BinData, or if the chunks do not
// add up to the file's length.
func (r *Reader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.err = r.nextChunk()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *Reader) nextChunk() error {
	if !r.cur.Next(r.ctx) {
		if err := r.cur.Err(); err != nil {
			return fmt.Errorf("gridfs: read chunks of %s: %w", r.ID.Hex(), err)
		}
		if r.read != r.Length {
			return fmt.Errorf("gridfs: file %s is truncated: %d of %d bytes in its chunks", r.ID.Hex(), r.read, r.Length)
		}
		return io.EOF
	}
	c := decodeChunk(r.cur.Current)
	n, ok := c.N.AsInt64OK()
	if !ok || n != int64(r.next) {
		return fmt.Errorf("gridfs: file %s: chunk %d missing (found n=%v)", r.ID.Hex(), r.next, c.N)
	}
	r.next++
	data := c.Data
	switch data.Type {
	case bson.TypeString:
		r.buf = []byte(data.StringValue())
	case bson.TypeBinary:
		_, b := data.Binary()
		r.buf = bytes.Clone(b)
	default:
		return fmt.Errorf("gridfs: file %s: chunk %d holds %s, not String or BinData", r.ID.Hex(), n, data.Type)
	}
	r.read += int64(len(r.buf))
	return nil
}

// Close releases the reader's cursor.
func (r *Reader) Close() error {
	return r.cur.Close(r.ctx)
}

// ReadFile returns the whole content of a file.
func (b *Bucket) ReadFile(ctx context.Context, id bson.ObjectID) ([]byte, error) {
	r, err := b.Open(ctx, id)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	buf := bytes.NewBuffer(make([]byte, 0, r.Length))
	if _, err := io.Copy(buf, r); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Find returns the files whose metadata.task_id is taskID, oldest first.
func (b *Bucket) Find(ctx context.Context, taskID bson.ObjectID) ([]File, error) {
	cur, err := b.files.Find(ctx, bson.D{{Key: "metadata.task_id", Value: taskID}},
		options.Find().SetSort(bson.D{{Key: "uploadDate", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("gridfs: find files of task %s: %w", taskID.Hex(), err)
	}
	defer cur.Close(ctx)
	var out []File
	for cur.Next(ctx) {
		out = append(out, decodeFile(cur.Current))
	}
	return out, cur.Err()
}
