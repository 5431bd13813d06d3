package cli

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

// den queue list and den status share the census with den web: within
// web.counts_age they show the counts as they were made (one count for
// all of them), and a command that finds them older counts anew. Not
// parallel: it sets the age through the environment, which the package's
// other tests leave at 0 (every command counts).
func TestCountsAgeSharedByCommands(t *testing.T) {
	t.Setenv("DEN_WEB_COUNTS_AGE", "1h")
	db := dentest.DB(t)
	q := dentest.Queue(t, db, "q", "Disbatch::Plugin::Demo", 1, "fifo")
	dentest.Tasks(t, db, q, bson.D{}, bson.D{})
	todo := func(args ...string) int64 {
		t.Helper()
		var rows []struct {
			Name string `json:"name"`
			Todo int64  `json:"todo"`
		}
		var status struct {
			Queues []struct {
				Name string `json:"name"`
				Todo int64  `json:"todo"`
			} `json:"queues"`
		}
		r := denDB(t, db, "", append(args, "--json")...).must(t, 0, args...)
		if args[0] == "status" {
			r.decode(t, &status)
			rows = status.Queues
		} else {
			r.decode(t, &rows)
		}
		if len(rows) != 1 || rows[0].Name != "q" {
			t.Fatalf("den %v: %+v", args, rows)
		}
		return rows[0].Todo
	}
	if n := todo("queue", "list"); n != 2 {
		t.Fatalf("den queue list: todo %d, want 2", n)
	}
	dentest.Tasks(t, db, q, bson.D{})
	if n, m := todo("queue", "list"), todo("status"); n != 2 || m != 2 {
		t.Errorf("within web.counts_age: den queue list todo %d, den status %d; want the census's 2 for both", n, m)
	}
	t.Setenv("DEN_WEB_COUNTS_AGE", "0")
	if n := todo("status"); n != 3 {
		t.Errorf("at web.counts_age 0, den status todo %d; want 3", n)
	}
	if n := todo("queue", "list"); n != 3 {
		t.Errorf("den queue list after den status counted anew: todo %d; want 3", n)
	}
}
