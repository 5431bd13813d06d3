package gridfs_test

import (
	"bytes"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/gridfs"
)

// BenchmarkWrite measures streaming output into Disbatch's GridFS: bytes
// per second, and (with -benchmem) that memory per write does not grow with
// the file: the writer holds one chunk at a time.
func BenchmarkWrite(b *testing.B) {
	db := dentest.DB(b)
	bucket := gridfs.NewBucket(db, "tasks")
	line := bytes.Repeat([]byte("log line with é and 😀 "), 200)
	w := bucket.Create(dentest.Context(b), "stdout", bson.D{{Key: "task_id", Value: bson.NewObjectID()}})
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := w.Write(line); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}
