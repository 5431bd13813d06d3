package worker

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// Whatever sizes a plugin writes in, live output is the last
// queue.LiveTail bytes of each stream and the offset they start at, as
// the stream will be stored; the tail's memory stays bounded.
func TestLiveTailIsTheStreamsEnd(t *testing.T) {
	t.Parallel()
	o := newOutputs(context.Background(), nil, bson.NewObjectID(), queue.GFSNever)
	o.limit = 1 << 30 // keep everything in memory: no GridFS here
	var all bytes.Buffer
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; all.Len() < 3*queue.LiveTail; i++ {
		n := r.IntN(40 << 10)
		if i%17 == 0 {
			n = queue.LiveTail + r.IntN(1000) // now and then more than the tail at once
		}
		p := make([]byte, n)
		for j := range p {
			p[j] = byte('a' + r.IntN(26)) // text: finish keeps it in memory
		}
		if _, err := o.stdout.Write(p); err != nil {
			t.Fatal(err)
		}
		all.Write(p)
		out, errs, ok := o.live()
		if !ok || errs.End() != 0 {
			t.Fatalf("live() = %v, stderr ends at %d", ok, errs.End())
		}
		want := all.Bytes()
		if len(want) > queue.LiveTail {
			want = want[len(want)-queue.LiveTail:]
		}
		if out.End() != int64(all.Len()) || !bytes.Equal(out.Data, want) {
			t.Fatalf("after %d bytes: live tail from %d, %d bytes; want the last %d", all.Len(), out.From, len(out.Data), len(want))
		}
		if cap(o.stdout.tail) > 2*queue.LiveTail+queue.LiveTail+1000 {
			t.Fatalf("tail holds %d bytes", cap(o.stdout.tail))
		}
	}
	if _, _, err := o.finish(); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := o.live(); ok {
		t.Fatal("live output after the result was taken")
	}
}
