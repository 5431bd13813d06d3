package cli

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

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
}
