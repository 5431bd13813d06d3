package gridfs

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cenkalti/backoff/v5"
)

// Writer streams one file into a bucket. Write stores every full chunk as it
// fills; Close stores the rest and then the files document, which makes the
// file visible. A Writer is not safe for concurrent use.
type Writer struct {
	ctx      context.Context
	bucket   *Bucket
	id       bson.ObjectID
	filename string
	metadata bson.D
	buf      []byte
	n        int32
	length   int64
	md5      hash.Hash
	err      error
	closed   bool
}

// Create starts a new file. ctx bounds every write the Writer makes.
// metadata may be nil.
func (b *Bucket) Create(ctx context.Context, filename string, metadata bson.D) *Writer {
	return &Writer{
		ctx:      ctx,
		bucket:   b,
		id:       bson.NewObjectID(),
		filename: filename,
		metadata: metadata,
		buf:      make([]byte, 0, b.chunkSize+utf8.UTFMax),
		md5:      md5.New(),
	}
}

// ID is the _id the file will have in the files collection.
func (w *Writer) ID() bson.ObjectID { return w.id }

// Length is the number of bytes written so far.
func (w *Writer) Length() int64 { return w.length }

// Write stores p, chunk by chunk. After a failed store every call fails with
// the same error.
func (w *Writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, errors.New("gridfs: write to closed file")
	}
	if w.err != nil {
		return 0, w.err
	}
	written := 0
	for len(p) > 0 {
		room := w.bucket.chunkSize - len(w.buf)
		take := min(room, len(p))
		w.buf = append(w.buf, p[:take]...)
		w.md5.Write(p[:take])
		w.length += int64(take)
		written += take
		p = p[take:]
		if len(w.buf) >= w.bucket.chunkSize {
			if err := w.flush(false); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// flush stores the buffered bytes as one chunk. Unless final, it keeps back
// an incomplete UTF-8 character at the end of the buffer, so that the next
// chunk starts with it whole.
func (w *Writer) flush(final bool) error {
	cut := len(w.buf)
	if !final {
		cut = runeBoundary(w.buf)
	}
	if cut == 0 {
		return nil
	}
	var data any
	if Text(w.buf[:cut]) {
		data = string(w.buf[:cut])
	} else {
		data = bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: append([]byte(nil), w.buf[:cut]...)}
	}
	err := w.bucket.insert(w.ctx, w.bucket.chunks, bson.D{
		{Key: "files_id", Value: w.id},
		{Key: "n", Value: w.n},
		{Key: "data", Value: data},
	})
	if err != nil {
		w.err = fmt.Errorf("gridfs: store chunk %d of %s %s: %w", w.n, w.filename, w.id.Hex(), err)
		return w.err
	}
	w.n++
	rest := copy(w.buf, w.buf[cut:])
	w.buf = w.buf[:rest]
	return nil
}

// Text reports whether output may be stored as a BSON String: it is valid
// UTF-8 (as BSON strings must be) and has no NUL character, which BSON
// allows in a string but C strings, Perl's and PostgreSQL's text (the
// development server's engine refuses such a write) do not keep. Other
// output is stored as BinData, byte for byte.
func Text(b []byte) bool {
	return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0
}

// runeBoundary returns where a chunk of buf may end: len(buf), or the start
// of a UTF-8 character that buf holds only the beginning of. Bytes that are
// not the start of a valid character do not hold the cut back.
func runeBoundary(buf []byte) int {
	for back := 1; back < utf8.UTFMax && back <= len(buf); back++ {
		start := len(buf) - back
		if !utf8.RuneStart(buf[start]) {
			continue
		}
		if utf8.FullRune(buf[start:]) {
			return len(buf)
		}
		if start == 0 {
			return len(buf) // a chunk is never empty
		}
		return start
	}
	return len(buf)
}

// Close stores what is left and the files document. It is safe to call more
// than once; later calls return the first result.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err != nil {
		return w.err
	}
	if err := w.flush(true); err != nil {
		return err
	}
	doc := bson.D{
		{Key: "_id", Value: w.id},
		{Key: "filename", Value: w.filename},
		{Key: "chunkSize", Value: int32(w.bucket.chunkSize)},
		{Key: "length", Value: w.length},
		{Key: "uploadDate", Value: time.Now()},
		{Key: "md5", Value: hex.EncodeToString(w.md5.Sum(nil))},
	}
	if w.metadata != nil {
		doc = append(doc, bson.E{Key: "metadata", Value: w.metadata})
	}
	if err := w.bucket.insert(w.ctx, w.bucket.files, doc); err != nil {
		w.err = fmt.Errorf("gridfs: store files document of %s %s: %w", w.filename, w.id.Hex(), err)
	}
	return w.err
}

// insert stores one document, retrying with backoff for up to the bucket's
// retry time while MongoDB is unreachable. A duplicate key means an earlier
// attempt landed although its reply was lost: that is success.
func (b *Bucket) insert(ctx context.Context, coll *mongo.Collection, doc bson.D) error {
	ctx, cancel := context.WithTimeout(ctx, b.retryFor)
	defer cancel()
	policy := backoff.NewExponentialBackOff()
	policy.InitialInterval, policy.MaxInterval = 50*time.Millisecond, 5*time.Second
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		_, err := coll.InsertOne(ctx, doc)
		if err == nil || mongo.IsDuplicateKeyError(err) {
			return struct{}{}, nil
		}
		if mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
			return struct{}{}, err
		}
		return struct{}{}, backoff.Permanent(err)
	}, backoff.WithBackOff(policy), backoff.WithMaxElapsedTime(0))
	return err
}

// Put stores data as one file and returns its _id.
func (b *Bucket) Put(ctx context.Context, filename string, metadata bson.D, data []byte) (bson.ObjectID, error) {
	w := b.Create(ctx, filename, metadata)
	if _, err := w.Write(data); err != nil {
		return w.id, err
	}
	return w.id, w.Close()
}
