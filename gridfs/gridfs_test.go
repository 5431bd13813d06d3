package gridfs_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/gridfs"
)

type chunk struct {
	N    int64
	Kind bson.Type
	Data []byte
}

func chunks(t *testing.T, db *mongo.Database, id bson.ObjectID) []chunk {
	t.Helper()
	ctx := dentest.Context(t)
	cur, err := db.Collection("tasks.chunks").Find(ctx, bson.D{{Key: "files_id", Value: id}}, options.Find().SetSort(bson.D{{Key: "n", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var out []chunk
	defer func() {
		if err := cur.Err(); err != nil {
			t.Fatal(err)
		}
	}()
	for cur.Next(ctx) {
		n, _ := cur.Current.Lookup("n").AsInt64OK()
		d := cur.Current.Lookup("data")
		c := chunk{N: n, Kind: d.Type}
		if d.Type == bson.TypeString {
			c.Data = []byte(d.StringValue())
		} else {
			_, c.Data = d.Binary()
		}
		out = append(out, c)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	// 4-byte, 3-byte and 2-byte characters, so that with a 10-byte chunk
	// size every kind of character falls across a chunk edge somewhere.
	multibyte := strings.Repeat("a😀€é", 40)
	invalid := []byte("ok\xff\xfe then text \xc3") // ends in a truncated é
	cases := []struct {
		name       string
		chunkSize  int
		data       []byte
		writes     int // split the data into this many writes
		wantString bool
	}{
		{"empty", 10, nil, 1, true},
		{"ascii multi-chunk", 10, []byte(strings.Repeat("abcdefghij", 7) + "xyz"), 3, true},
		{"multibyte at chunk edges", 10, []byte(multibyte), 7, true},
		{"multibyte one byte at a time", 10, []byte(multibyte[:60]), 60, true},
		{"invalid utf-8", 10, append([]byte(multibyte[:30]), invalid...), 2, false},
		// Valid UTF-8, but a NUL: stored byte for byte, as BinData (a
		// String with a NUL is refused by the development server's
		// PostgreSQL, and cut short by C and Perl tools).
		{"nul", 10, []byte("before\x00after, and more text"), 1, false},
		{"disbatch chunk size", gridfs.ChunkSize, bytes.Repeat([]byte("é"), gridfs.ChunkSize), 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := dentest.DB(t)
			b := gridfs.NewBucket(db, "tasks").WithChunkSize(tc.chunkSize)
			taskID := bson.NewObjectID()
			w := b.Create(dentest.Context(t), "stdout", bson.D{{Key: "task_id", Value: taskID}})
			step := max(len(tc.data)/tc.writes, 1)
			for i := 0; i < len(tc.data); i += step {
				if _, err := w.Write(tc.data[i:min(i+step, len(tc.data))]); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}

			got, err := b.ReadFile(dentest.Context(t), w.ID())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.data) {
				t.Fatalf("read %d bytes, differ from the %d written", len(got), len(tc.data))
			}

			// The files document is Disbatch's.
			f, err := db.Collection("tasks.files").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: w.ID()}}).Raw()
			if err != nil {
				t.Fatal(err)
			}
			sum := md5.Sum(tc.data)
			if l, _ := f.Lookup("length").AsInt64OK(); l != int64(len(tc.data)) {
				t.Errorf("length %d, want %d", l, len(tc.data))
			}
			if m := f.Lookup("md5").StringValue(); m != hex.EncodeToString(sum[:]) {
				t.Errorf("md5 %s", m)
			}
			if cs, _ := f.Lookup("chunkSize").AsInt64OK(); cs != int64(tc.chunkSize) {
				t.Errorf("chunkSize %d", cs)
			}
			if f.Lookup("filename").StringValue() != "stdout" || f.Lookup("metadata", "task_id").ObjectID() != taskID {
				t.Errorf("filename/metadata wrong: %s", f)
			}
			if _, ok := f.Lookup("uploadDate").TimeOK(); !ok {
				t.Error("no uploadDate")
			}

			// Chunks: String unless their bytes are not UTF-8, never a
			// character split, none over the chunk size.
			var joined []byte
			for i, c := range chunks(t, db, w.ID()) {
				if c.N != int64(i) {
					t.Fatalf("chunk %d has n=%d", i, c.N)
				}
				if len(c.Data) > tc.chunkSize || len(c.Data) == 0 {
					t.Errorf("chunk %d has %d bytes", i, len(c.Data))
				}
				if text := utf8.Valid(c.Data) && !bytes.Contains(c.Data, []byte{0}); text != (c.Kind == bson.TypeString) {
					t.Errorf("chunk %d is %s with text=%v", i, c.Kind, text)
				}
				if tc.wantString && c.Kind != bson.TypeString {
					t.Errorf("chunk %d of valid UTF-8 stored as %s", i, c.Kind)
				}
				joined = append(joined, c.Data...)
			}
			if !bytes.Equal(joined, tc.data) {
				t.Fatal("chunks do not concatenate to the data")
			}
		})
	}
}

// The reader also reads files written by standard GridFS (binary chunks of
// a fixed size), such as Disbatch's own Go runner writes.
func TestReadsStandardGridFS(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	data := bytes.Repeat([]byte("standard \x00\xff gridfs "), 2000)
	id := bson.NewObjectID()
	const size = 1000
	for n := 0; n*size < len(data); n++ {
		part := data[n*size : min((n+1)*size, len(data))]
		_, err := db.Collection("tasks.chunks").InsertOne(ctx, bson.D{{Key: "files_id", Value: id}, {Key: "n", Value: n},
			{Key: "data", Value: bson.Binary{Data: part}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	dentest.Insert(t, db.Collection("tasks.files"), bson.D{{Key: "_id", Value: id}, {Key: "length", Value: int64(len(data))},
		{Key: "chunkSize", Value: size}, {Key: "filename", Value: "stdout"}})
	got, err := gridfs.NewBucket(db, "tasks").ReadFile(ctx, id)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, err %v", len(got), err)
	}
}

func TestReaderDetectsDamage(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	b := gridfs.NewBucket(db, "tasks").WithChunkSize(4)
	id, err := b.Put(ctx, "stderr", nil, []byte("0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	dentest.Delete(t, db.Collection("tasks.chunks"), bson.D{{Key: "files_id", Value: id}, {Key: "n", Value: 1}})
	if _, err := b.ReadFile(ctx, id); err == nil || !strings.Contains(err.Error(), "chunk 1 missing") {
		t.Fatalf("err = %v", err)
	}
	if _, err := b.ReadFile(ctx, bson.NewObjectID()); err == nil {
		t.Fatal("no error for a missing file")
	}
}

// A failed store makes the writer fail, and keep failing.
func TestWriterReportsStoreErrors(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx, cancel := context.WithCancel(dentest.Context(t))
	w := gridfs.NewBucket(db, "tasks").WithChunkSize(4).Create(ctx, "stdout", nil)
	cancel()
	if _, err := w.Write([]byte("0123456789")); err == nil {
		t.Fatal("write with a cancelled context succeeded")
	}
	if _, err := io.WriteString(w, "x"); err == nil {
		t.Fatal("write after a failure succeeded")
	}
	if err := w.Close(); err == nil {
		t.Fatal("close after a failure succeeded")
	}
}
