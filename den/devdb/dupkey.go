package devdb

import (
	"bytes"
	"encoding/binary"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/wire"
)

// FerretDB answers a write that would duplicate a unique index's key (an
// update that would, an index that the documents already there would
// break) with an InternalError that quotes its engine's refusal:
// PostgreSQL's unique_violation (SQLSTATE 23505), SQLite's "UNIQUE
// constraint failed". MongoDB answers E11000, code 11000 (DuplicateKey),
// by which drivers and den tell a duplicate from a failure. The proxy
// gives its clients MongoDB's answer: it rewrites those errors of a write
// command's reply, at its top level and in its writeErrors, to code 11000,
// their message kept after MongoDB's "E11000 duplicate key error". This
// is the one place den reads an error's text: the server's, on the wire,
// to make it the protocol's.

// duplicateKeyCode and duplicateKeyName are MongoDB's.
const (
	duplicateKeyCode = 11000
	duplicateKeyName = "DuplicateKey"
)

// engineDuplicate reports whether an error message of FerretDB's is its
// engine's unique-index refusal.
func engineDuplicate(msg string) bool {
	return strings.Contains(msg, "SQLSTATE 23505") || strings.Contains(msg, "UNIQUE constraint failed")
}

// mongoDuplicates returns reply with FerretDB's duplicate-key errors made
// MongoDB's, or reply itself when it has none (or is not a plain OP_MSG
// reply: one with a checksum is left as it is).
func mongoDuplicates(reply []byte) []byte {
	body := wire.Body(reply)
	if body == nil || !bytes.Contains(body, []byte("UNIQUE constraint failed")) && !bytes.Contains(body, []byte("SQLSTATE 23505")) {
		return reply
	}
	const checksumPresent = 1
	if binary.LittleEndian.Uint32(reply[wire.HeaderLen:])&checksumPresent != 0 {
		return reply
	}
	var doc bson.D
	if err := bson.Unmarshal(body, &doc); err != nil {
		return reply
	}
	changed := rewriteDuplicate(doc)
	for i, e := range doc {
		if e.Key != "writeErrors" {
			continue
		}
		list, ok := e.Value.(bson.A)
		if !ok {
			continue
		}
		for j, we := range list {
			if d, ok := we.(bson.D); ok && rewriteDuplicate(d) {
				list[j], changed = d, true
			}
		}
		doc[i].Value = list
	}
	if !changed {
		return reply
	}
	newBody, err := bson.Marshal(doc)
	if err != nil {
		return reply
	}
	start := wire.HeaderLen + 5 // header, flags, section kind 0
	out := make([]byte, 0, len(reply)-len(body)+len(newBody))
	out = append(out, reply[:start]...)
	out = append(out, newBody...)
	out = append(out, reply[start+len(body):]...)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return out
}

// rewriteDuplicate makes an error document ({code, codeName, errmsg}) that
// is the engine's duplicate-key refusal MongoDB's, and reports whether it
// was one.
func rewriteDuplicate(d bson.D) bool {
	var msg string
	at := -1
	for i, e := range d {
		if e.Key == "errmsg" {
			msg, _ = e.Value.(string)
			at = i
		}
	}
	if at < 0 || !engineDuplicate(msg) {
		return false
	}
	d[at].Value = "E11000 duplicate key error: " + msg
	for i, e := range d {
		switch e.Key {
		case "code":
			d[i].Value = int32(duplicateKeyCode)
		case "codeName":
			d[i].Value = duplicateKeyName
		}
	}
	return true
}
