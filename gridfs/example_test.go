package gridfs_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/gridfs"
)

// A task's stdout written as a stream in Disbatch's layout and read back:
// the file is named "stdout" and carries metadata.task_id, and its chunks
// are BSON strings that never split a UTF-8 character (the first chunk
// stops at 7 bytes rather than cut the é in two). The chunk size is
// made small here to show the split; den writes gridfs.ChunkSize. The
// database is the test server the package's TestMain starts.
func ExampleBucket_Create() {
	db, drop := dentest.ExampleDB("ExampleBucket_Create")
	defer drop()
	ctx := context.Background()
	bucket := gridfs.NewBucket(db, "tasks").WithChunkSize(8)

	taskID := bson.NewObjectID()
	w := bucket.Create(ctx, "stdout", bson.D{{Key: "task_id", Value: taskID}})
	for _, line := range []string{"café résumé\n", "naïve\n", "done\n"} {
		if _, err := io.WriteString(w, line); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	// The chunks as Disbatch's tools see them.
	cur, err := db.Collection("tasks.chunks").Find(ctx, bson.D{{Key: "files_id", Value: w.ID()}},
		options.Find().SetSort(bson.D{{Key: "n", Value: 1}}))
	if err != nil {
		log.Fatal(err)
	}
	for cur.Next(ctx) {
		data := cur.Current.Lookup("data")
		fmt.Printf("chunk %d: %s %q\n", cur.Current.Lookup("n").AsInt64(), data.Type, data.StringValue())
	}
	if err := cur.Close(ctx); err != nil {
		log.Fatal(err)
	}

	// The task's files, found by its id, and one read back as a stream.
	files, err := bucket.Find(ctx, taskID)
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range files {
		fmt.Printf("%s: %d bytes, md5 %s\n", f.Filename, f.Length, f.MD5)
		r, err := bucket.Open(ctx, f.ID)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := io.Copy(os.Stdout, r); err != nil {
			log.Fatal(err)
		}
		r.Close()
	}
	// Output:
	// chunk 0: string "café r"
	// chunk 1: string "ésumé\n"
	// chunk 2: string "naïve\nd"
	// chunk 3: string "one\n"
	// stdout: 27 bytes, md5 3318a8a8efddb1a595c1acddf9fc214f
	// café résumé
	// naïve
	// done
}
