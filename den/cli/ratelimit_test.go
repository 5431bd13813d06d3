package cli

import (
	"cmp"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// den queue create --rate-limit and den queue set rate_limit=... write the
// document the nodes read; a limit they would refuse is refused with the
// reason, and none removes it.
func TestQueueRateLimitCommands(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	var created struct{ ID string }
	denDB(t, db, "", "queue", "create", "api", "--plugin", demo.Name, "--rate-limit", "2/10s", "--json").must(t, ExitOK).decode(t, &created)
	id, err := bson.ObjectIDFromHex(created.ID)
	if err != nil {
		t.Fatal(err)
	}
	rate := func() string {
		raw, err := db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: id}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		v := raw.Lookup("rate_limit")
		if v.Type == 0 {
			return ""
		}
		l, err := queue.DecodeRateLimit(v)
		if err != nil {
			t.Fatalf("rate_limit %s: %v", v, err)
		}
		return v.String() + " " + l.String()
	}
	if got := rate(); got != `{"starts": {"$numberInt":"2"},"per": {"$numberLong":"10"}} 2/10s` {
		t.Fatalf("created with rate_limit %s, want {starts: 2, per: 10}", got)
	}
	listed(t, db, "2/10s")
	denDB(t, db, "", "queue", "set", "api", "rate_limit=100/1.5").must(t, ExitOK)
	if got := rate(); got != `{"starts": {"$numberInt":"100"},"per": {"$numberDouble":"1.5"}} 100/1.5s` {
		t.Fatalf("set rate_limit=100/1.5: %s", got)
	}
	r := denDB(t, db, "", "queue", "set", "api", "rate_limit=0/10").must(t, ExitUsage)
	if !strings.Contains(r.stderr, "starts") {
		t.Errorf("rate_limit=0/10 said %q", r.stderr)
	}
	denDB(t, db, "", "queue", "set", "api", "rate_limit=none").must(t, ExitOK)
	if got := rate(); got != "" {
		t.Errorf("rate_limit=none left %s", got)
	}
	listed(t, db, "")
}

// listed checks that den queue list shows queue api's rate limit (empty:
// none) in its RATE column (- for none) and as rate_limit in --json (null
// for none).
func listed(t *testing.T, db *mongo.Database, want string) {
	t.Helper()
	out := denDB(t, db, "", "queue", "list").must(t, ExitOK).stdout
	if got := column(t, out, "api", "RATE"); got != cmp.Or(want, "-") {
		t.Errorf("den queue list shows api's rate limit as %q, want %q:\n%s", got, cmp.Or(want, "-"), out)
	}
	var rows []struct {
		Name      string
		RateLimit *string `json:"rate_limit"`
	}
	denDB(t, db, "", "queue", "list", "--json").must(t, ExitOK).decode(t, &rows)
	if len(rows) != 1 || (want == "") != (rows[0].RateLimit == nil) || (want != "" && *rows[0].RateLimit != want) {
		t.Errorf("den queue list --json: %+v, want rate_limit %q", rows, want)
	}
}

// column is the word in column col (by its header's place) of the row of
// table out whose first word is first.
func column(t *testing.T, out, first, col string) string {
	t.Helper()
	lines := strings.Split(out, "\n")
	at := strings.Index(lines[0], col)
	if at < 0 {
		t.Fatalf("no column %s in:\n%s", col, out)
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first && len(l) > at {
			if w := strings.Fields(l[at:]); len(w) > 0 {
				return w[0]
			}
		}
	}
	t.Fatalf("no row %s with a column %s in:\n%s", first, col, out)
	return ""
}
