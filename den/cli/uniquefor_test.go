package cli

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
)

// --unique makes the key from the queue and the parameters: two adds of
// the same parameters (keys in another order, 7 as 7.0) insert one task,
// other parameters another. With --unique-for 1h, a third add after the
// task ended is refused (exit 3, saying until when), and a task that ended
// longer ago than its hold no longer holds the key.
func TestTaskAddUnique(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "sync", demo.Name, 1, "fifo")
	add := func(line string, code int, args ...string) result {
		t.Helper()
		return denDB(t, db, line+"\n", append([]string{"task", "add", "sync"}, args...)...).must(t, code)
	}
	var first struct{ IDs []string }
	add(`{"n":7,"a":"x"}`, ExitOK, "--unique", "--json").decode(t, &first)
	r := add(`{"a":"x","n":7.0}`, ExitHeld, "--unique")
	if !strings.Contains(r.stderr, first.IDs[0]) || !strings.Contains(r.stderr, "sha256:") {
		t.Fatalf("second add: %q, want the holder %s and the key", r.stderr, first.IDs[0])
	}
	add(`{"n":8,"a":"x"}`, ExitOK, "--unique")
	if n := dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: qid}}); n != 2 {
		t.Fatalf("%d tasks, want 2: one per distinct parameters", n)
	}

	var held struct{ IDs []string }
	add(`{"account":"42"}`, ExitOK, "--unique", "--unique-for", "1h", "--json").decode(t, &held)
	add(`{"account":"42"}`, ExitHeld, "--unique-for", "1h") // --unique-for implies --unique
	id, _ := bson.ObjectIDFromHex(held.IDs[0])
	// It ends (as a Perl node or a cancel writes it): held an hour yet.
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: 1}, {Key: "node", Value: "n1"}}},
		{Key: "$currentDate", Value: bson.D{{Key: "mtime", Value: true}}}})
	r = add(`{"account":"42"}`, ExitHeld, "--unique", "--unique-for", "1h")
	if !strings.Contains(r.stderr, held.IDs[0]) || !strings.Contains(r.stderr, "until") {
		t.Fatalf("third add after the end: %q, want the ended holder and until when", r.stderr)
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: qid}, {Key: "parameters.account", Value: "42"}}); n != 1 {
		t.Fatalf("%d tasks for account 42, want 1", n)
	}
	// Two hours after its end, the key is free.
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "unique_until", Value: ""}}},
		{Key: "$set", Value: bson.D{{Key: "mtime", Value: dentest.Task(t, db, id).Lookup("mtime").Time().Add(-2 * time.Hour)}}}})
	add(`{"account":"42"}`, ExitOK, "--unique", "--unique-for", "1h")

	// Usage errors: both ways of keying, several tasks, a hold of 0.
	add(`{"n":1}`, ExitUsage, "--unique", "--unique-key", "k")
	denDB(t, db, "{}\n{}\n", "task", "add", "sync", "--unique").must(t, ExitUsage)
	add(`{"n":1}`, ExitUsage, "--unique-for", "0s")
	add(`{"n":1}`, ExitUsage, "--unique-for", "9000h")
}
