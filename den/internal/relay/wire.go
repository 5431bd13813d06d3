package relay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Wire protocol op codes and OP_MSG flags.
const (
	headerLen = 16

	opReply = 1
	opQuery = 2004
	opMsg   = 2013

	flagChecksumPresent = 1 << 0
	flagMoreToCome      = 1 << 1
	flagExhaustAllowed  = 1 << 16
	// Bits 0-15 are required: a receiver that does not know one must fail.
	requiredFlags = 0xffff
	knownFlags    = flagChecksumPresent | flagMoreToCome | flagExhaustAllowed
)

// message is one request as the relay needs it: a command document with the
// OP_MSG document sequences folded in as arrays.
type message struct {
	requestID int32
	// query is true for a legacy OP_QUERY (only the handshake uses it).
	query bool
	// moreToCome is set when the client expects no reply.
	moreToCome bool
	// body is the command; for OP_QUERY the query document, unwrapped
	// from $query.
	body bson.Raw
}

// readMessage reads one wire message of at most max bytes.
func readMessage(r io.Reader, max int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(int32(binary.LittleEndian.Uint32(hdr[:])))
	if n < headerLen || n > max {
		return nil, fmt.Errorf("message length %d outside [%d, %d]", n, headerLen, max)
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	if _, err := io.ReadFull(r, msg[4:]); err != nil {
		return nil, fmt.Errorf("read message body: %w", err)
	}
	return msg, nil
}

// parseMessage decodes a whole wire message (header included).
func parseMessage(b []byte) (message, error) {
	var m message
	if len(b) < headerLen || int(binary.LittleEndian.Uint32(b)) != len(b) {
		return m, errors.New("message length does not match its header")
	}
	m.requestID = int32(binary.LittleEndian.Uint32(b[4:]))
	op := binary.LittleEndian.Uint32(b[12:])
	rest := b[headerLen:]
	switch op {
	case opMsg:
		return parseMsg(m, rest)
	case opQuery:
		return parseQuery(m, rest)
	default:
		return m, fmt.Errorf("op code %d not supported (only OP_MSG, and OP_QUERY for the handshake)", op)
	}
}

func parseMsg(m message, b []byte) (message, error) {
	if len(b) < 4 {
		return m, errors.New("OP_MSG without flags")
	}
	flags := binary.LittleEndian.Uint32(b)
	if unknown := flags &^ knownFlags & requiredFlags; unknown != 0 {
		return m, fmt.Errorf("OP_MSG has unknown required flags %#x", unknown)
	}
	m.moreToCome = flags&flagMoreToCome != 0
	b = b[4:]
	if flags&flagChecksumPresent != 0 {
		if len(b) < 4 {
			return m, errors.New("OP_MSG checksum missing")
		}
		b = b[:len(b)-4] // not verified: the transport is a local socket
	}
	var body []byte
	type sequence struct {
		id   string
		docs [][]byte
	}
	var seqs []sequence
	for len(b) > 0 {
		kind := b[0]
		b = b[1:]
		switch kind {
		case 0:
			if body != nil {
				return m, errors.New("OP_MSG has two body sections")
			}
			doc, err := document(b)
			if err != nil {
				return m, fmt.Errorf("OP_MSG body: %w", err)
			}
			body, b = doc, b[len(doc):]
		case 1:
			if len(b) < 4 {
				return m, errors.New("OP_MSG document sequence without size")
			}
			size := int(int32(binary.LittleEndian.Uint32(b)))
			if size < 5 || size > len(b) {
				return m, fmt.Errorf("OP_MSG document sequence size %d out of range", size)
			}
			sec := b[4:size]
			b = b[size:]
			end := bytes.IndexByte(sec, 0)
			if end < 0 {
				return m, errors.New("OP_MSG document sequence without identifier")
			}
			s := sequence{id: string(sec[:end])}
			for sec = sec[end+1:]; len(sec) > 0; {
				doc, err := document(sec)
				if err != nil {
					return m, fmt.Errorf("OP_MSG document sequence %q: %w", s.id, err)
				}
				s.docs, sec = append(s.docs, doc), sec[len(doc):]
			}
			seqs = append(seqs, s)
		default:
			return m, fmt.Errorf("OP_MSG section kind %d not supported", kind)
		}
	}
	if body == nil {
		return m, errors.New("OP_MSG without a body section")
	}
	if len(seqs) == 0 {
		m.body = body
		return m, nil
	}
	// Fold each sequence into the body as an array field.
	out := make([]byte, 4, len(body)+len(b)+64)
	out = append(out, body[4:len(body)-1]...)
	for _, s := range seqs {
		if bson.Raw(body).Lookup(s.id).Type != 0 {
			return m, fmt.Errorf("OP_MSG document sequence %q repeats a body field", s.id)
		}
		if s.id == "" {
			return m, errors.New("OP_MSG document sequence with an empty identifier")
		}
		out = append(out, byte(bson.TypeArray))
		out = append(out, s.id...)
		out = append(out, 0)
		start := len(out)
		out = append(out, 0, 0, 0, 0)
		for i, d := range s.docs {
			out = append(out, byte(bson.TypeEmbeddedDocument))
			out = strconv.AppendInt(out, int64(i), 10)
			out = append(out, 0)
			out = append(out, d...)
		}
		out = append(out, 0)
		binary.LittleEndian.PutUint32(out[start:], uint32(len(out)-start))
	}
	out = append(out, 0)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	m.body = out
	return m, nil
}

// parseQuery decodes an OP_QUERY: flags, full collection name, skip,
// return count, query document (and an ignored field selector).
func parseQuery(m message, b []byte) (message, error) {
	if len(b) < 4 {
		return m, errors.New("OP_QUERY without flags")
	}
	b = b[4:]
	end := bytes.IndexByte(b, 0)
	if end < 0 {
		return m, errors.New("OP_QUERY without a collection name")
	}
	b = b[end+1:]
	if len(b) < 8 {
		return m, errors.New("OP_QUERY without skip and return counts")
	}
	doc, err := document(b[8:])
	if err != nil {
		return m, fmt.Errorf("OP_QUERY document: %w", err)
	}
	m.query = true
	m.body = doc
	if q, ok := doc.Lookup("$query").DocumentOK(); ok {
		m.body = q
	}
	return m, nil
}

// document returns the valid BSON document at the start of b.
func document(b []byte) (bson.Raw, error) {
	if len(b) < 5 {
		return nil, errors.New("truncated document")
	}
	n := int(int32(binary.LittleEndian.Uint32(b)))
	if n < 5 || n > len(b) {
		return nil, fmt.Errorf("document length %d out of range", n)
	}
	doc := bson.Raw(b[:n])
	if err := validate(doc, 0); err != nil {
		return nil, err
	}
	return doc, nil
}

// maxDepth bounds the nesting of documents (MongoDB allows 100 levels in
// stored documents; commands add a few).
const maxDepth = 200

// validate checks doc and every document nested in it.
func validate(doc bson.Raw, depth int) error {
	if depth > maxDepth {
		return errors.New("documents nested too deeply")
	}
	if err := doc.Validate(); err != nil {
		return err
	}
	elems, err := doc.Elements()
	if err != nil {
		return err
	}
	for _, e := range elems {
		v := e.Value()
		var sub bson.Raw
		switch v.Type {
		case bson.TypeEmbeddedDocument, bson.TypeArray:
			sub = v.Value
		case bson.TypeCodeWithScope:
			_, scope, ok := v.CodeWithScopeOK()
			if !ok {
				return fmt.Errorf("field %q: bad code with scope", e.Key())
			}
			sub = scope
		default:
			continue
		}
		if err := validate(sub, depth+1); err != nil {
			return fmt.Errorf("field %q: %w", e.Key(), err)
		}
	}
	return nil
}

// msgReply is an OP_MSG reply to request responseTo carrying doc.
func msgReply(requestID, responseTo int32, doc []byte) []byte {
	out := header(headerLen+4+1+len(doc), requestID, responseTo, opMsg)
	out = binary.LittleEndian.AppendUint32(out, 0)
	out = append(out, 0)
	return append(out, doc...)
}

// queryReply is an OP_REPLY to an OP_QUERY carrying doc.
func queryReply(requestID, responseTo int32, doc []byte) []byte {
	out := header(headerLen+20+len(doc), requestID, responseTo, opReply)
	out = binary.LittleEndian.AppendUint32(out, 0) // responseFlags
	out = binary.LittleEndian.AppendUint64(out, 0) // cursorID
	out = binary.LittleEndian.AppendUint32(out, 0) // startingFrom
	out = binary.LittleEndian.AppendUint32(out, 1) // numberReturned
	return append(out, doc...)
}

func header(length int, requestID, responseTo int32, op uint32) []byte {
	out := make([]byte, 0, length)
	out = binary.LittleEndian.AppendUint32(out, uint32(length))
	out = binary.LittleEndian.AppendUint32(out, uint32(requestID))
	out = binary.LittleEndian.AppendUint32(out, uint32(responseTo))
	return binary.LittleEndian.AppendUint32(out, op)
}
