package queue_test

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

func TestParseQueue(t *testing.T) {
	t.Parallel()
	id := bson.NewObjectID()
	cases := []struct {
		name    string
		doc     bson.D
		plugin  string
		limit   int
		global  bool
		problem bool
		sort    string
		err     string
	}{
		{name: "protocol spelling", doc: bson.D{{Key: "constructor", Value: "P"}, {Key: "maxthreads", Value: 3}, {Key: "sort", Value: "lifo"}}, plugin: "P", limit: 3, sort: "lifo"},
		{name: "later spelling", doc: bson.D{{Key: "plugin", Value: "P"}, {Key: "threads", Value: int64(4)}}, plugin: "P", limit: 4, global: true, sort: "default"},
		{name: "double from the shell", doc: bson.D{{Key: "constructor", Value: "P"}, {Key: "maxthreads", Value: 2.0}}, plugin: "P", limit: 2, sort: "default"},
		{name: "null limit", doc: bson.D{{Key: "constructor", Value: "P"}, {Key: "maxthreads", Value: nil}}, plugin: "P", limit: 0, sort: "default"},
		{name: "negative limit", doc: bson.D{{Key: "constructor", Value: "P"}, {Key: "maxthreads", Value: -2}}, plugin: "P", problem: true, sort: "default"},
		{name: "string limit", doc: bson.D{{Key: "constructor", Value: "P"}, {Key: "maxthreads", Value: "3"}}, plugin: "P", problem: true, sort: "default"},
		{name: "fractional limit", doc: bson.D{{Key: "constructor", Value: "P"}, {Key: "maxthreads", Value: 1.5}}, plugin: "P", problem: true, sort: "default"},
		{name: "unknown sort", doc: bson.D{{Key: "constructor", Value: "P"}, {Key: "sort", Value: "random"}}, plugin: "P", sort: "default"},
		{name: "rate limit", doc: bson.D{{Key: "constructor", Value: "P"}, {Key: "rate_limit", Value: bson.D{{Key: "starts", Value: 2}, {Key: "per", Value: 10}}}}, plugin: "P", sort: "default"},
		{name: "malformed rate limit", doc: bson.D{{Key: "constructor", Value: "P"}, {Key: "rate_limit", Value: bson.D{{Key: "starts", Value: 0}, {Key: "per", Value: 10}}}}, err: "rate_limit starts is"},
		{name: "no plugin", doc: bson.D{{Key: "name", Value: "x"}}, err: "has no plugin"},
		{name: "plugin not a string", doc: bson.D{{Key: "constructor", Value: 5}}, err: "has no plugin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, _ := bson.Marshal(append(bson.D{{Key: "_id", Value: id}}, tc.doc...))
			q, err := queue.ParseQueue(raw)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if q.Plugin != tc.plugin || q.MaxThreads != tc.limit || q.Global != tc.global || (q.MaxThreadsProblem != "") != tc.problem || q.Sort != tc.sort {
				t.Fatalf("got %+v", q)
			}
		})
	}
}

func TestParseTask(t *testing.T) {
	t.Parallel()
	qid := bson.NewObjectID()
	cases := []struct {
		name string
		doc  bson.D
		err  string
	}{
		{"parameters", bson.D{{Key: "queue", Value: qid}, {Key: "parameters", Value: bson.D{{Key: "a", Value: 1}}}}, ""},
		{"params (Disbatch 4.x)", bson.D{{Key: "queue", Value: qid}, {Key: "params", Value: bson.D{{Key: "a", Value: 1}}}}, ""},
		{"no parameters", bson.D{{Key: "queue", Value: qid}}, "parameters is missing"},
		{"parameters a string", bson.D{{Key: "queue", Value: qid}, {Key: "parameters", Value: "x"}}, "must be an object"},
		{"queue a string", bson.D{{Key: "queue", Value: qid.Hex()}, {Key: "parameters", Value: bson.D{}}}, "must be the ObjectId of a queue"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, _ := bson.Marshal(append(bson.D{{Key: "_id", Value: bson.NewObjectID()}}, tc.doc...))
			task, err := queue.ParseTask(raw)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if v, ok := task.Param("a"); !ok || v.AsInt64() != 1 {
					t.Fatalf("param a = %v", v)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

// TaskCounts counts by queue and status; given queues, only theirs.
func TestTaskCounts(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	a := dentest.Queue(t, db, "a", "Demo", 1, "fifo")
	b := dentest.Queue(t, db, "b", "Demo", 1, "fifo")
	dentest.Tasks(t, db, a, bson.D{}, bson.D{})
	dentest.Tasks(t, db, b, bson.D{})
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: b}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: 1}}}})
	store := queue.NewStore(db)
	all, err := store.TaskCounts(dentest.Context(t))
	if err != nil || len(all) != 2 || all[a].ByStatus[queue.StatusQueued] != 2 || all[b].ByStatus[1] != 1 {
		t.Errorf("all queues: %v, %v", all, err)
	}
	only, err := store.TaskCounts(dentest.Context(t), b)
	if err != nil || len(only) != 1 || only[b].ByStatus[1] != 1 || only[b].Total() != 1 {
		t.Errorf("queue b only: %v, %v", only, err)
	}
}
