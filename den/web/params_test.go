package web_test

import (
	"net/url"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

// ?param=KEY=VALUE finds a task under either name of its parameters
// (params, as Disbatch 4 writes them, and parameters), and matches a
// number as a number of any type, or its text as typed; "7" quoted is the
// text only.
func TestTaskListParamSearchEitherName(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	q := dentest.Queue(t, db, "p", "Disbatch::Plugin::Demo", 1, "fifo")
	added := dentest.Tasks(t, db, q, bson.D{{Key: "n", Value: int32(7)}}, bson.D{{Key: "n", Value: "7"}}, bson.D{{Key: "n", Value: 7.5}})
	d4 := bson.NewObjectID()
	dentest.Insert(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: d4}, {Key: "queue", Value: q}, {Key: "status", Value: -2}, {Key: "node", Value: -1},
		{Key: "params", Value: bson.D{{Key: "n", Value: int64(7)}}}})
	srv := serve(t, db, "")
	c := client(nil)
	for _, tc := range []struct {
		param string
		want  []bson.ObjectID
	}{
		{"n=7", []bson.ObjectID{d4, added[1], added[0]}}, // the number, or its text
		{`n="7"`, []bson.ObjectID{added[1]}},
		{"n=7.5", []bson.ObjectID{added[2]}},
		{"n=x", nil},
	} {
		code, body := get(t, c, srv.URL+"/tasks?param="+url.QueryEscape(tc.param))
		got, _, _ := rowsAndLinks(body)
		var want []string
		for _, id := range tc.want {
			want = append(want, id.Hex())
		}
		if code != 200 || !slices.Equal(got, want) {
			t.Errorf("param %q: %d %v, want 200 %v", tc.param, code, got, want)
		}
	}
}
