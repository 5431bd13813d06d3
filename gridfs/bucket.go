package gridfs

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// ChunkSize is the chunk size Disbatch writes: 255 KiB.
const ChunkSize = 255 * 1024

// Bucket is a Disbatch GridFS bucket: <prefix>.files and <prefix>.chunks.
type Bucket struct {
	files     *mongo.Collection
	chunks    *mongo.Collection
	chunkSize int
	// retryFor bounds how long one write keeps retrying while MongoDB is
	// unreachable.
	retryFor time.Duration
}

// NewBucket returns the bucket with the given prefix ("tasks" for task
// output) in db.
func NewBucket(db *mongo.Database, prefix string) *Bucket {
	return &Bucket{
		files:     db.Collection(prefix + ".files"),
		chunks:    db.Collection(prefix + ".chunks"),
		chunkSize: ChunkSize,
		retryFor:  2 * time.Minute,
	}
}

// WithChunkSize returns a copy of the bucket that writes chunks of n bytes
// (for tests; Disbatch always uses ChunkSize).
func (b *Bucket) WithChunkSize(n int) *Bucket {
	c := *b
	c.chunkSize = max(n, 4)
	return &c
}
