package queue_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// Store.Queues, which every pass of a node reads, brings back only the
// fields den reads of a queue: a 4 MiB field and 1,000 fields of no
// concern to den stay in the database, and every setting reads as it does
// from the whole document (the runner reads a task's queue settings from
// the same projected document).
func TestQueuesReadOnlyWhatANodeUses(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	junk := bson.D{{Key: "junk", Value: dentest.HugeString(4 << 20)}}
	for i := range 1000 {
		junk = append(junk, bson.E{Key: fmt.Sprintf("f%d", i), Value: int32(i)})
	}
	settings := bson.D{
		{Key: "count_todo", Value: int64(3)}, {Key: "count_total", Value: int64(9)},
		{Key: "gfs", Value: "auto"}, {Key: "timeout", Value: 30.0}, {Key: "max_retries", Value: int32(2)},
		{Key: "retry_delay", Value: "90s"}, {Key: "max_termination_time", Value: int32(5)}, {Key: "max_output", Value: int64(1 << 20)},
		{Key: "max_timeouts", Value: int32(1)}, {Key: "usage_interval", Value: 2.0}, {Key: "max_processes", Value: int32(64)},
		{Key: "requested_resources", Value: bson.D{{Key: "memory_mb", Value: int32(512)}, {Key: "cpus", Value: 1.5}}},
		{Key: "memory_retry_factor", Value: 1.5}, {Key: "rate_limit", Value: bson.D{{Key: "starts", Value: int32(2)}, {Key: "per", Value: 10.0}}},
		{Key: "retention", Value: bson.D{{Key: "succeeded", Value: "1h"}, {Key: "failed", Value: "2d"}}},
	}
	docs := []bson.D{
		append(append(bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "name", Value: "protocol"}, {Key: "constructor", Value: "P"},
			{Key: "maxthreads", Value: int32(3)}, {Key: "sort", Value: "lifo"}}, settings...), junk...),
		append(append(bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "name", Value: "later"}, {Key: "plugin", Value: "P"},
			{Key: "threads", Value: int32(4)}, {Key: "sort", Value: "fifo"}}, settings...), junk...),
		append(bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "name", Value: "paused"}, {Key: "constructor", Value: "P"},
			{Key: "maxthreads", Value: int32(0)}, {Key: "threads", Value: int32(0)},
			{Key: "paused", Value: bson.D{{Key: "maxthreads", Value: int32(3)}, {Key: "at", Value: time.Now()}, {Key: "by", Value: "ops"}}}}, junk...),
		{{Key: "_id", Value: bson.NewObjectID()}, {Key: "name", Value: "bad counts"}, {Key: "constructor", Value: "P"},
			{Key: "count_todo", Value: "3"}, {Key: "retention", Value: bson.D{{Key: "succeeded", Value: "x"}}}},
	}
	want := map[bson.ObjectID]queue.Queue{}
	for _, d := range docs {
		dentest.Insert(t, db.Collection("queues"), d)
		raw, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		q, err := queue.ParseQueue(raw)
		if err != nil {
			t.Fatal(err)
		}
		want[q.ID] = q
	}
	got, bad, err := queue.NewStore(db).Queues(ctx)
	if err != nil || len(bad) != 0 || len(got) != len(docs) {
		t.Fatalf("Queues: %d queues, %v malformed, %v; want %d, none", len(got), bad, err, len(docs))
	}
	for _, q := range got {
		w := want[q.ID]
		// Every field the hostile corpus says den reads comes back.
		for _, f := range dentest.QueueFields {
			top, _, _ := strings.Cut(f, ".")
			if w.Raw.Lookup(top).Type != 0 && q.Raw.Lookup(top).Type == 0 {
				t.Errorf("queue %s: field %s, which den reads, was left out", q.Name, top)
			}
		}
		if len(q.Raw) > 4<<10 {
			t.Errorf("queue %s: %d bytes read, want the fields den reads only (under 4 KiB)", q.Name, len(q.Raw))
		}
		if q.Raw.Lookup("junk").Type != 0 || q.Raw.Lookup("f999").Type != 0 {
			t.Errorf("queue %s: fields den does not read came back", q.Name)
		}
		// As the runner reads it.
		again, err := queue.ParseQueue(q.Raw)
		if err != nil {
			t.Errorf("queue %s: the projected document does not parse: %v", q.Name, err)
		}
		q.Raw, w.Raw, again.Raw = nil, nil, nil
		if !reflect.DeepEqual(q, w) || !reflect.DeepEqual(again, w) {
			t.Errorf("queue %s read as\n%+v\nfrom the whole document\n%+v", w.Name, q, w)
		}
	}
}
