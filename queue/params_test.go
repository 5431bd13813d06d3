package queue_test

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A queue's schema names where its tasks' parameters go: params when its
// plugin is named by plugin (later Disbatch 4), parameters when by
// constructor (the protocol's, which wins when both are there).
func TestParamsFieldFollowsTheQueue(t *testing.T) {
	t.Parallel()
	id := bson.NewObjectID()
	for _, tc := range []struct {
		name string
		doc  bson.D
		want string
	}{
		{"constructor", bson.D{{Key: "constructor", Value: "P"}, {Key: "maxthreads", Value: 1}}, "parameters"},
		{"plugin", bson.D{{Key: "plugin", Value: "P"}, {Key: "threads", Value: 1}}, "params"},
		{"plugin and maxthreads", bson.D{{Key: "plugin", Value: "P"}, {Key: "maxthreads", Value: 1}}, "params"},
		{"both", bson.D{{Key: "constructor", Value: "P"}, {Key: "plugin", Value: "P"}}, "parameters"},
		{"constructor null", bson.D{{Key: "constructor", Value: nil}, {Key: "plugin", Value: "P"}}, "params"},
	} {
		doc := append(bson.D{{Key: "_id", Value: id}, {Key: "name", Value: "q"}}, tc.doc...)
		q, err := queue.ParseQueue(bson.Raw(bsonDoc(t, doc)))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := q.ParamsField(); got != tc.want {
			t.Errorf("%s: ParamsField %q, want %q", tc.name, got, tc.want)
		}
	}
}

// paramTasks inserts into a queue one task per parameters document, under
// the field named, and returns their ids.
func paramTasks(t *testing.T, qid bson.ObjectID, store queue.OperatorStore, field string, params ...bson.D) []bson.ObjectID {
	t.Helper()
	raws := make([]bson.Raw, len(params))
	for i, p := range params {
		raws[i] = bson.Raw(bsonDoc(t, p))
	}
	ids, err := store.InsertTasks(dentest.Context(t), qid, raws, time.Now(), queue.InsertOptions{Params: field == "params"})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// Every search by a parameter finds a task under either name: the DCI's
// filters (SearchTasks, CountTasksMatching), negations and nested $and,
// $or and $nor included, and the task list's parameter search
// (TaskFilter), which matches a number as a number and a string as a
// string.
func TestSearchFindsParametersUnderEitherName(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	ctx := dentest.Context(t)
	store := queue.NewStore(db)
	qid := dentest.Queue(t, db, "q", "Any", 1, "fifo")
	n := func(v any) bson.D { return bson.D{{Key: "n", Value: v}} }
	p := paramTasks(t, qid, store, "params", n(int32(7)), n("7"), n(int32(8)))
	pp := paramTasks(t, qid, store, "parameters", n(int64(7)), n(7.0), n("7"), n(int32(8)), bson.D{{Key: "m", Value: true}})
	// A task with neither, and one with both (parameters wins, as den
	// reads it).
	none := dentest.TaskWith(t, db, qid, nil)
	both := dentest.TaskWith(t, db, qid, n(int32(9)), bson.E{Key: "params", Value: n(int32(7))})
	if _, err := db.Collection("tasks").UpdateOne(ctx, bson.D{{Key: "_id", Value: none}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "parameters", Value: ""}}}}); err != nil {
		t.Fatal(err)
	}
	all := append(append(slices.Clone(p), pp...), none, both)
	except := func(ids ...bson.ObjectID) []bson.ObjectID {
		return slices.DeleteFunc(slices.Clone(all), func(id bson.ObjectID) bool { return slices.Contains(ids, id) })
	}
	q := bson.E{Key: "queue", Value: qid}
	for _, tc := range []struct {
		name   string
		filter bson.D
		want   []bson.ObjectID
	}{
		{"params.n 7", bson.D{q, {Key: "params.n", Value: 7}}, []bson.ObjectID{p[0], pp[0], pp[1]}},
		{"parameters.n 7", bson.D{q, {Key: "parameters.n", Value: 7}}, []bson.ObjectID{p[0], pp[0], pp[1]}},
		{"params.n \"7\"", bson.D{q, {Key: "params.n", Value: "7"}}, []bson.ObjectID{p[1], pp[2]}},
		{"params.n $ne 7", bson.D{q, {Key: "params.n", Value: bson.D{{Key: "$ne", Value: 7}}}}, except(p[0], pp[0], pp[1])},
		{"params.n $in", bson.D{q, {Key: "params.n", Value: bson.D{{Key: "$in", Value: bson.A{8, 9}}}}}, []bson.ObjectID{p[2], pp[3], both}},
		{"params exists false", bson.D{q, {Key: "params", Value: bson.D{{Key: "$exists", Value: false}}}}, []bson.ObjectID{none}},
		{"two keys", bson.D{q, {Key: "params.n", Value: 7}, {Key: "parameters.n", Value: 7}}, []bson.ObjectID{p[0], pp[0], pp[1]}},
		{"$or beside", bson.D{q, {Key: "$or", Value: bson.A{bson.D{{Key: "status", Value: -2}}}}, {Key: "params.m", Value: true}}, []bson.ObjectID{pp[4]}},
		{"inside $or", bson.D{q, {Key: "$or", Value: bson.A{bson.D{{Key: "params.m", Value: true}}, bson.D{{Key: "params.n", Value: 8}}}}}, []bson.ObjectID{p[2], pp[3], pp[4]}},
		{"inside $nor", bson.D{q, {Key: "$nor", Value: bson.A{bson.D{{Key: "params.n", Value: bson.D{{Key: "$exists", Value: true}}}}}}}, []bson.ObjectID{none, pp[4]}},
	} {
		docs, err := store.SearchTasks(ctx, tc.filter, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 1}}, 0, 0)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []bson.ObjectID
		for _, d := range docs {
			got = append(got, d.Lookup("_id").ObjectID())
		}
		want := slices.Clone(tc.want)
		slices.SortFunc(want, func(a, b bson.ObjectID) int { return bytes.Compare(a[:], b[:]) })
		if !slices.Equal(got, want) {
			t.Errorf("%s: found %v, want %v", tc.name, got, want)
		}
		if c, err := store.CountTasksMatching(ctx, tc.filter); err != nil || c != int64(len(want)) {
			t.Errorf("%s: counted %d (%v), want %d", tc.name, c, err, len(want))
		}
	}
	for _, tc := range []struct {
		text string
		want []bson.ObjectID
	}{
		{"7", []bson.ObjectID{p[0], p[1], pp[0], pp[1], pp[2]}}, // the number, or its text
		{"7.0", []bson.ObjectID{p[0], pp[0], pp[1]}},            // its text is "7.0"
		{`"7"`, []bson.ObjectID{p[1], pp[2]}},                   // the text only
		{"9", []bson.ObjectID{both}},
		{"x7", nil},
		{`{"$ne":7}`, nil}, // text, never an operator
	} {
		list, err := store.ListTasks(ctx, queue.TaskFilter{Queues: []bson.ObjectID{qid}, ParamKey: "n", ParamValue: queue.ParseParamValue(tc.text)})
		if err != nil {
			t.Fatal(err)
		}
		var got []bson.ObjectID
		for _, task := range list {
			got = append(got, task.ID)
		}
		want := slices.Clone(tc.want)
		slices.SortFunc(want, func(a, b bson.ObjectID) int { return bytes.Compare(b[:], a[:]) }) // newest first
		if !slices.Equal(got, want) {
			t.Errorf("param n=%s: listed %v, want %v", tc.text, got, want)
		}
	}
}

// A parameter search's value is JSON when it is a JSON number, string or
// boolean, else the text itself.
func TestParseParamValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		want any
	}{
		{"7", []any{int64(7), "7"}}, {"-2.5", []any{-2.5, "-2.5"}}, {"1e3", []any{1000.0, "1e3"}}, {`"7"`, "7"},
		{"true", []any{true, "true"}}, {"false", []any{false, "false"}},
		{"ann", "ann"}, {"", ""}, {"01234", "01234"}, {"null", "null"}, {`{"$ne":1}`, `{"$ne":1}`}, {"[1]", "[1]"},
		{"7 8", "7 8"}, {`"a" x`, `"a" x`}, {"1e999", "1e999"}, {"9223372036854775808", []any{9223372036854775808.0, "9223372036854775808"}},
	} {
		if got := queue.ParseParamValue(tc.text); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseParamValue(%q) = %#v, want %#v", tc.text, got, tc.want)
		}
	}
}
