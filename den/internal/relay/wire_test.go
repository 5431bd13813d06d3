package relay

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"
)

func mustDoc(t testing.TB, d bson.D) []byte {
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// buildMsg builds an OP_MSG with a body and one document sequence.
func buildMsg(t testing.TB, flags uint32, body bson.D, seqID string, docs ...bson.D) []byte {
	out := header(0, 7, 0, opMsg)
	out = binary.LittleEndian.AppendUint32(out, flags)
	out = append(out, 0)
	out = append(out, mustDoc(t, body)...)
	if seqID != "" {
		out = append(out, 1)
		start := len(out)
		out = append(out, 0, 0, 0, 0)
		out = append(out, seqID...)
		out = append(out, 0)
		for _, d := range docs {
			out = append(out, mustDoc(t, d)...)
		}
		binary.LittleEndian.PutUint32(out[start:], uint32(len(out)-start))
	}
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return out
}

func opQueryMsg(t testing.TB, doc bson.D) []byte {
	out := header(0, 9, 0, opQuery)
	out = binary.LittleEndian.AppendUint32(out, 0)
	out = append(out, "admin.$cmd"...)
	out = append(out, 0)
	out = binary.LittleEndian.AppendUint32(out, 0)
	out = binary.LittleEndian.AppendUint32(out, 0xffffffff)
	out = append(out, mustDoc(t, doc)...)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return out
}

func TestParseFoldsDocumentSequences(t *testing.T) {
	msg := buildMsg(t, flagMoreToCome, bson.D{{Key: "insert", Value: "c"}, {Key: "$db", Value: "d"}}, "documents",
		bson.D{{Key: "a", Value: 1}}, bson.D{{Key: "a", Value: 2}})
	m, err := parseMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	if !m.moreToCome || m.requestID != 7 || m.query {
		t.Fatalf("parsed %+v", m)
	}
	var got struct {
		Insert    string
		Documents []struct{ A int }
	}
	if err := bson.Unmarshal(m.body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Insert != "c" || len(got.Documents) != 2 || got.Documents[1].A != 2 {
		t.Fatalf("folded body %v", m.body)
	}
	q, err := parseMessage(opQueryMsg(t, bson.D{{Key: "isMaster", Value: 1}}))
	if err != nil || !q.query || q.body.Lookup("isMaster").Type == 0 {
		t.Fatalf("OP_QUERY parsed as %+v, %v", q, err)
	}
}

func TestParseRejectsMalformed(t *testing.T) {
	good := buildMsg(t, 0, bson.D{{Key: "ping", Value: 1}}, "")
	cases := map[string][]byte{
		"short":            good[:10],
		"length mismatch":  append(append([]byte(nil), good...), 0),
		"unknown op":       func() []byte { b := append([]byte(nil), good...); b[12] = 99; return b }(),
		"unknown flag":     func() []byte { b := append([]byte(nil), good...); b[16] = 1 << 3; return b }(),
		"bad section kind": func() []byte { b := append([]byte(nil), good...); b[20] = 5; return b }(),
		"truncated body": func() []byte {
			b := append([]byte(nil), good[:len(good)-2]...)
			binary.LittleEndian.PutUint32(b, uint32(len(b)))
			return b
		}(),
		"two bodies": func() []byte {
			b := append(append([]byte(nil), good...), good[20:]...)
			binary.LittleEndian.PutUint32(b, uint32(len(b)))
			return b
		}(),
		"sequence repeats":    buildMsg(t, 0, bson.D{{Key: "insert", Value: "c"}, {Key: "documents", Value: 1}}, "documents", bson.D{}),
		"no body, only flags": func() []byte { b := append([]byte(nil), good[:20]...); binary.LittleEndian.PutUint32(b, 20); return b }(),
	}
	for name, msg := range cases {
		if _, err := parseMessage(msg); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}

// A malformed message closes that connection, and only that one.
func TestMalformedMessageClosesTheConnection(t *testing.T) {
	r := New(nil, zaptest.NewLogger(t))
	defer r.Close()
	p := r.NewPeer(nil)
	defer p.Close()
	serve := func() net.Conn {
		a, b := net.Pipe()
		p.Serve(r.ctx, a)
		return b
	}
	bad, good := serve(), serve()
	msg := buildMsg(t, 0, bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}}, "")
	broken := append([]byte(nil), msg...)
	broken[16] = 1 << 4 // an unknown required flag
	go bad.Write(broken)
	if _, err := bad.Read(make([]byte, 1)); err == nil {
		t.Fatal("the relay answered a malformed message instead of closing")
	}
	huge := binary.LittleEndian.AppendUint32(nil, defaultMaxMessage+1)
	tooBig := serve()
	go tooBig.Write(huge)
	if _, err := tooBig.Read(make([]byte, 1)); err == nil {
		t.Fatal("the relay read a message over maxMessageSizeBytes")
	}
	go good.Write(msg)
	reply, err := readMessage(good, defaultMaxMessage)
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(reply[8:]); got != 7 {
		t.Fatalf("reply responds to %d, want 7", got)
	}
	if !bytes.Contains(reply, []byte("ok")) {
		t.Fatalf("ping reply %x", reply)
	}
}

// The parser never panics, and what it accepts is valid BSON.
func FuzzParseMessage(f *testing.F) {
	f.Add(buildMsg(f, 0, bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}}, ""))
	f.Add(buildMsg(f, flagMoreToCome|flagChecksumPresent, bson.D{{Key: "insert", Value: "c"}}, "documents", bson.D{{Key: "a", Value: 1}}, bson.D{{Key: "b", Value: "x"}}))
	f.Add(opQueryMsg(f, bson.D{{Key: "$query", Value: bson.D{{Key: "isMaster", Value: 1}}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMessage(b)
		if err != nil {
			return
		}
		var d bson.D
		if err := bson.Unmarshal(m.body, &d); err != nil {
			t.Fatalf("accepted a body that does not decode: %v", err)
		}
		body, _ := strip(m.body)
		if err := bson.Unmarshal(body, &d); err != nil {
			t.Fatalf("stripped body does not decode: %v", err)
		}
	})
}
