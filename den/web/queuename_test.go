package web_test

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A queue name of 1,000,000 bytes, which any writer may put in the
// database (den and the Disbatch API refuse names over 200 bytes), is
// shown cut to 200 bytes, with "…", on every page that names the queue
// (issue 41, finding 8: the overview was 9.1 MB): the overview, the queue
// page, the task lists, a task's page, the node page and the schedules.
func TestLongQueueNameShownCut(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	huge := strings.Repeat("x", 1_000_000)
	dentest.Update(t, f.db.Collection("queues"), bson.D{{Key: "_id", Value: f.queue}}, bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: huge}}}})
	dentest.Insert(t, f.db.Collection("schedules"), bson.D{{Key: "_id", Value: "nightly"}, {Key: "queue", Value: f.queue},
		{Key: "every", Value: int64(3600)}, {Key: "next", Value: time.Now().Add(time.Hour)}})
	srv := serve(t, f.db, "")
	c := client(nil)
	shown := strings.Repeat("x", queue.MaxQueueName-len("…")) + "…"
	for _, path := range []string{"/", "/queues/" + f.queue.Hex(), "/tasks", "/tasks?queue=" + f.queue.Hex(), "/tasks/" + f.done.Hex(),
		"/nodes/n1", "/schedules"} {
		st, body := get(t, c, srv.URL+path)
		if st != 200 || len(body) > 200_000 || strings.Contains(body, strings.Repeat("x", queue.MaxQueueName)) {
			t.Errorf("GET %s: %d, %d bytes; want 200, the name cut to %d bytes", path, st, len(body), queue.MaxQueueName)
		}
		if !strings.Contains(body, shown) {
			t.Errorf("GET %s does not show the name cut with …", path)
		}
		t.Logf("GET %s: %d bytes", path, len(body))
	}
}
