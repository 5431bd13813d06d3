package web_test

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// With a real node serving one queue, a task of a queue whose plugin no
// node has says why on its page, and the overview flags that queue, not
// the one the node serves; a task held by start_after says that.
func TestWhyOnThePage(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	served := dentest.Queue(t, db, "served", "Disbatch::Plugin::Command", 1, "fifo")
	nobody := dentest.Queue(t, db, "nobody", "No::Such::Plugin", 1, "fifo")
	lonely := dentest.Tasks(t, db, nobody, bson.D{})[0]
	later := dentest.Tasks(t, db, served, bson.D{{Key: "shell", Value: "true"}})[0]
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: later}}, bson.D{{Key: "$set", Value: bson.D{{Key: "start_after", Value: time.Now().Add(time.Hour)}}}})
	srv := serve(t, db, "")
	c := client(nil)
	if _, body := get(t, c, srv.URL+"/tasks/"+lonely.Hex()); !strings.Contains(body, `data-code="`+queue.WhyNoLiveNode+`"`) {
		t.Errorf("with no node, the task page does not say so:\n%s", body)
	}
	startNode(t, db, "worker")
	dentest.Eventually(t, time.Minute, "the node listing the queue it serves", func() bool {
		return dentest.Count(t, db.Collection("nodes"), bson.D{{Key: "node", Value: "worker"}, {Key: "queues.id", Value: served.Hex()}}) == 1
	})
	_, body := get(t, c, srv.URL+"/tasks/"+lonely.Hex())
	if !strings.Contains(body, `data-code="`+queue.WhyNoNodeServes+`"`) || !strings.Contains(body, "none has its plugin No::Such::Plugin") {
		t.Errorf("the task page does not say no live node serves the queue:\n%s", body)
	}
	if _, body := get(t, c, srv.URL+"/tasks/"+later.Hex()); !strings.Contains(body, `data-code="`+queue.WhyStartAfter+`"`) {
		t.Errorf("the task page does not say start_after holds the task:\n%s", body)
	}
	_, body = get(t, c, srv.URL+"/")
	for name, flagged := range map[string]bool{"nobody": true, "served": false} {
		i := strings.Index(body, `data-queue="`+name+`"`)
		if i < 0 {
			t.Fatalf("the overview has no row for %s", name)
		}
		row := body[i:]
		row = row[:strings.Index(row, "</tr>")]
		if got := strings.Contains(row, "no live node serves it"); got != flagged {
			t.Errorf("queue %s flagged %v, want %v:\n%s", name, got, flagged, row)
		}
	}
}
