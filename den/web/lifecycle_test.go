package web_test

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

// The overview tells running, stopped and dead nodes apart.
func TestNodeStatesShown(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	now := time.Now()
	dentest.Insert(t, db.Collection("nodes"),
		bson.D{{Key: "node", Value: "up"}, {Key: "timestamp", Value: now}},
		bson.D{{Key: "node", Value: "down"}, {Key: "timestamp", Value: now.Add(-time.Hour)}, {Key: "stopped", Value: now.Add(-time.Hour)}},
		bson.D{{Key: "node", Value: "gone"}, {Key: "timestamp", Value: now.Add(-time.Hour)}})
	srv := serve(t, db, "")
	_, body := get(t, client(nil), srv.URL+"/")
	for name, state := range map[string]string{"up": "running", "down": "stopped", "gone": "dead"} {
		i := strings.Index(body, `data-node="`+name+`"`)
		if i < 0 {
			t.Fatalf("no row for node %s", name)
		}
		row := body[i:]
		row = row[:strings.Index(row, "</tr>")]
		if !strings.Contains(row, `data-state="`+state+`"`) || (state != "running" && !strings.Contains(row, ">"+state+"</span>")) {
			t.Errorf("node %s is not shown %s:\n%s", name, state, row)
		}
	}
}
