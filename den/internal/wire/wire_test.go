package wire

import (
	"bytes"
	"encoding/binary"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// opMsg builds an OP_MSG with flags and one body document.
func opMsg(t *testing.T, flags uint32, body bson.D) []byte {
	t.Helper()
	doc, err := bson.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, HeaderLen+5, HeaderLen+5+len(doc))
	binary.LittleEndian.PutUint32(msg[12:], OpMsg)
	binary.LittleEndian.PutUint32(msg[HeaderLen:], flags)
	msg = append(msg, doc...)
	binary.LittleEndian.PutUint32(msg, uint32(len(msg)))
	return msg
}

// opQuery builds a legacy OP_QUERY on admin.$cmd with one document.
func opQuery(t *testing.T, body bson.D) []byte {
	t.Helper()
	doc, err := bson.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, HeaderLen+4)
	binary.LittleEndian.PutUint32(msg[12:], OpQuery)
	msg = append(msg, "admin.$cmd\x00"...)
	msg = append(msg, make([]byte, 8)...) // skip, return
	msg = append(msg, doc...)
	binary.LittleEndian.PutUint32(msg, uint32(len(msg)))
	return msg
}

func TestCommandAndFlags(t *testing.T) {
	for _, tc := range []struct {
		name       string
		msg        []byte
		cmd, coll  string
		moreToCome bool
	}{
		{"OP_MSG insert", opMsg(t, 0, bson.D{{Key: "insert", Value: "tasks"}, {Key: "$db", Value: "d"}}), "insert", "tasks", false},
		{"OP_MSG without reply", opMsg(t, FlagMoreToCome, bson.D{{Key: "update", Value: "queues"}}), "update", "queues", true},
		{"OP_MSG hello", opMsg(t, 0, bson.D{{Key: "hello", Value: 1}}), "hello", "", false},
		{"OP_QUERY isMaster", opQuery(t, bson.D{{Key: "isMaster", Value: 1}}), "isMaster", "", false},
		{"truncated", opMsg(t, 0, bson.D{{Key: "find", Value: "x"}})[:HeaderLen+6], "", "", false},
	} {
		cmd, coll := Command(tc.msg)
		if cmd != tc.cmd || coll != tc.coll || MoreToCome(tc.msg) != tc.moreToCome {
			t.Errorf("%s: %q %q %v, want %q %q %v", tc.name, cmd, coll, MoreToCome(tc.msg), tc.cmd, tc.coll, tc.moreToCome)
		}
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		db   string
	}{
		{"OP_MSG", opMsg(t, 0, bson.D{{Key: "insert", Value: "tasks"}, {Key: "$db", Value: "d"}}), "d"},
		{"OP_MSG without $db", opMsg(t, 0, bson.D{{Key: "insert", Value: "tasks"}}), ""},
		{"OP_QUERY", opQuery(t, bson.D{{Key: "isMaster", Value: 1}}), "admin"},
		{"truncated", opMsg(t, 0, bson.D{{Key: "find", Value: "x"}, {Key: "$db", Value: "d"}})[:HeaderLen+6], ""},
	} {
		if db := Database(tc.msg); db != tc.db {
			t.Errorf("%s: database %q, want %q", tc.name, db, tc.db)
		}
	}
	if ok, _ := Body(opMsg(t, 0, bson.D{{Key: "ok", Value: 1.0}})).Lookup("ok").AsFloat64OK(); ok != 1 {
		t.Error("Body does not read an OP_MSG's body")
	}
	if Body(opQuery(t, bson.D{{Key: "ok", Value: 1.0}})) != nil {
		t.Error("Body read an OP_QUERY")
	}
}

func TestReadWholeMessages(t *testing.T) {
	a, b := opMsg(t, 0, bson.D{{Key: "ping", Value: 1}}), opMsg(t, 0, bson.D{{Key: "find", Value: "tasks"}})
	r := bytes.NewReader(append(append([]byte(nil), a...), b...))
	for i, want := range [][]byte{a, b} {
		got, err := Read(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	bad := make([]byte, 16)
	binary.LittleEndian.PutUint32(bad, 3) // shorter than a header
	if _, err := Read(bytes.NewReader(bad)); err == nil {
		t.Error("a message shorter than its header was read")
	}
}
