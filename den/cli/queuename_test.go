package cli

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
)

// Queue names (issue 41, finding 8): den queue create and set refuse a
// name that is 24 hexadecimal digits (here another queue's id) and one
// over 200 bytes; a queue a writer named with another's id does not hide
// that queue from its id; a name of 1,000,000 bytes a writer put in the
// database is shown cut in den queue list and den status (on main they
// printed it whole: 14 MB for den status).
func TestQueueNamesInTheCommandLine(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	var created struct{ ID string }
	denDB(t, db, "", "queue", "create", "a", "--plugin", demo.Name, "--json").must(t, ExitOK).decode(t, &created)
	for _, tc := range []struct {
		args []string
		say  string
	}{
		{[]string{"queue", "create", created.ID, "--plugin", demo.Name}, "24 hexadecimal digits"},
		{[]string{"queue", "create", strings.Repeat("n", 100_000), "--plugin", demo.Name}, "100000 bytes; a queue's name is at most 200"},
		{[]string{"queue", "set", "a", "name=" + created.ID}, "24 hexadecimal digits"},
		{[]string{"queue", "set", "a", "name=" + strings.Repeat("n", 201)}, "at most 200"},
	} {
		r := denDB(t, db, "", tc.args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, tc.say) || len(r.stderr) > 1000 {
			t.Errorf("den %.60v: exit %d, stderr %.300q; want %d saying %q", tc.args, r.code, r.stderr, ExitUsage, tc.say)
		}
	}
	if n := dentest.Count(t, db.Collection("queues"), bson.D{}); n != 1 {
		t.Fatalf("%d queues after refused creates, want 1", n)
	}

	// What a writer may put there all the same.
	aID, _ := bson.ObjectIDFromHex(created.ID)
	forged := dentest.Queue(t, db, created.ID, demo.Name, 1, "fifo")
	huge := strings.Repeat("x", 1_000_000)
	long := dentest.Queue(t, db, huge, demo.Name, 1, "fifo")
	for _, id := range dentest.Tasks(t, db, long, bson.D{}, bson.D{}) {
		setTask(t, db, id, bson.D{{Key: "status", Value: 2}, {Key: "node", Value: "n1"}, {Key: "stderr", Value: "boom"}})
	}
	denDB(t, db, "", "queue", "set", created.ID, "maxthreads=3").must(t, ExitOK)
	if q := queueDoc(t, db, aID); q["maxthreads"] != int32(3) {
		t.Errorf("den queue set ID changed %v, want queue a (maxthreads 3)", q)
	}
	if q := queueDoc(t, db, forged); q["maxthreads"] != int32(1) {
		t.Errorf("den queue set ID changed the queue named with that id: %v", q)
	}
	show := denDB(t, db, "", "queue", "show", created.ID, "--json").must(t, ExitOK).stdout
	if !strings.Contains(show, `"name": "a"`) {
		t.Errorf("den queue show ID showed %.300s, want queue a", show)
	}
	for _, args := range [][]string{{"queue", "list"}, {"status"}} {
		out := denDB(t, db, "", args...).must(t, ExitOK, args...).stdout
		if len(out) > 20_000 || !strings.Contains(out, strings.Repeat("x", 190)+"…") {
			t.Errorf("den %v printed %d bytes; want the 1,000,000-byte name cut to 200 bytes with …", args, len(out))
		}
		t.Logf("den %v: %d bytes", args, len(out))
	}
}
