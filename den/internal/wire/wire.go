package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

const (
	// HeaderLen is the length of a message's header.
	HeaderLen = 16
	// OpMsg and OpQuery are the opcodes of OP_MSG and the legacy
	// OP_QUERY (which drivers use for their first handshake only).
	OpMsg   = 2013
	OpQuery = 2004
	// FlagMoreToCome is OP_MSG's flag: another message follows without a
	// request (a request that wants no reply, or an exhaust reply).
	FlagMoreToCome = 1 << 1
	// MaxLen is the longest message read: MongoDB's own limit is 48 MB.
	MaxLen = 256 << 20
)

// Read reads one whole message.
func Read(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(hdr[:]))
	if n < HeaderLen || n > MaxLen {
		return nil, fmt.Errorf("bad message length %d", n)
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	if _, err := io.ReadFull(r, msg[4:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// OpCode is a message's opcode.
func OpCode(msg []byte) uint32 { return binary.LittleEndian.Uint32(msg[12:16]) }

// MoreToCome reports whether an OP_MSG has the moreToCome flag.
func MoreToCome(msg []byte) bool {
	return OpCode(msg) == OpMsg && len(msg) >= HeaderLen+4 &&
		binary.LittleEndian.Uint32(msg[HeaderLen:])&FlagMoreToCome != 0
}

// Body is an OP_MSG's body document (its kind 0 section, first), or nil.
func Body(msg []byte) bson.Raw {
	if OpCode(msg) != OpMsg || len(msg) < HeaderLen+5 || msg[HeaderLen+4] != 0 {
		return nil
	}
	doc := msg[HeaderLen+5:]
	if len(doc) < 5 {
		return nil
	}
	return doc[:min(int(binary.LittleEndian.Uint32(doc)), len(doc))]
}

// Command returns the name of the command in msg (an OP_MSG with the
// command first in its body, or a legacy OP_QUERY), or "", and the
// command's collection (its first value, when that is a string).
func Command(msg []byte) (name, coll string) {
	var doc []byte
	switch OpCode(msg) {
	case OpMsg:
		if len(msg) < HeaderLen+5 || msg[HeaderLen+4] != 0 {
			return "", ""
		}
		doc = msg[HeaderLen+5:]
	case OpQuery: // flags, cstring collection, skip, return, document
		rest := msg[HeaderLen+4:]
		i := bytes.IndexByte(rest, 0)
		if i < 0 || len(rest) < i+9 {
			return "", ""
		}
		doc = rest[i+9:]
	default:
		return "", ""
	}
	if len(doc) < 6 {
		return "", ""
	}
	key := doc[5:]
	end := bytes.IndexByte(key, 0)
	if end < 0 {
		return "", ""
	}
	name = string(key[:end])
	// A string value: int32 length (with its NUL), then the bytes.
	if doc[4] == 0x02 && len(key) >= end+5 {
		n := int(binary.LittleEndian.Uint32(key[end+1:]))
		if v := key[end+5:]; n > 0 && len(v) >= n {
			coll = string(v[:n-1])
		}
	}
	return name, coll
}

// Database returns the database a request's command works on: an OP_MSG
// body's $db, or the namespace's database of a legacy OP_QUERY
// ("admin.$cmd"); "" when msg names none.
func Database(msg []byte) string {
	switch OpCode(msg) {
	case OpMsg:
		db, _ := Body(msg).Lookup("$db").StringValueOK()
		return db
	case OpQuery:
		if len(msg) < HeaderLen+4 {
			return ""
		}
		rest := msg[HeaderLen+4:]
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return ""
		}
		ns := string(rest[:i])
		if j := strings.IndexByte(ns, '.'); j >= 0 {
			return ns[:j]
		}
		return ns
	}
	return ""
}
