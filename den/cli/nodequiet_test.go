package cli

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
)

// den node quiet sets a node's maxthreads to 0, keeping what it had, and
// den node resume puts it back; each says when there was nothing to do.
func TestNodeQuietCommand(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	dentest.Insert(t, db.Collection("nodes"),
		bson.D{{Key: "node", Value: "w1"}, {Key: "timestamp", Value: time.Now()}, {Key: "maxthreads", Value: int32(6)}})
	doc := func() bson.Raw {
		raw, err := db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: "w1"}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	out := denDB(t, db, "", "node", "quiet", "w1").must(t, ExitOK).stdout
	if !strings.Contains(out, "node w1 is quiet") {
		t.Errorf("quiet said %q", out)
	}
	raw := doc()
	if mt, _ := raw.Lookup("maxthreads").AsInt64OK(); mt != 0 || raw.Lookup("maxthreads").Type == 0 {
		t.Fatalf("quiet node: %s", raw)
	}
	if kept, _ := raw.Lookup("quiet", "maxthreads").AsInt64OK(); kept != 6 {
		t.Errorf("quiet kept %d, want 6", kept)
	}
	if by, _ := raw.Lookup("quiet", "by").StringValueOK(); !strings.HasPrefix(by, "den node quiet (") {
		t.Errorf("quiet by %q", by)
	}
	shownQuiet(t, db, "quiet (resumes: 6)", "6")
	if out := denDB(t, db, "", "node", "quiet", "w1").must(t, ExitOK).stdout; !strings.Contains(out, "quiet already") {
		t.Errorf("quiet twice said %q", out)
	}
	var ans struct {
		Node, Action string
		Changed      bool
	}
	denDB(t, db, "", "node", "resume", "w1", "--json").must(t, ExitOK).decode(t, &ans)
	if ans.Node != "w1" || ans.Action != "resume" || !ans.Changed {
		t.Errorf("resume --json: %+v", ans)
	}
	raw = doc()
	if mt, _ := raw.Lookup("maxthreads").AsInt64OK(); mt != 6 || raw.Lookup("quiet").Type != 0 {
		t.Errorf("resumed node: %s", raw)
	}
	shownQuiet(t, db, "6", "")
	if out := denDB(t, db, "", "node", "resume", "w1").must(t, ExitOK).stdout; !strings.Contains(out, "was not quiet") {
		t.Errorf("resume of a node not quiet said %q", out)
	}
	denDB(t, db, "", "node", "quiet", "nosuch").must(t, ExitError)
}

// shownQuiet checks how den node list and den status show node w1's
// maxthreads (want), and the maxthreads den node list --json says it
// resumes with (empty: not quiet).
func shownQuiet(t *testing.T, db *mongo.Database, want, resumes string) {
	t.Helper()
	for _, args := range [][]string{{"node", "list"}, {"status"}} {
		out := denDB(t, db, "", args...).must(t, ExitOK).stdout
		if _, nodes, ok := strings.Cut(out, "NODE "); ok {
			out = "NODE " + nodes // den status: the nodes' table
		}
		row := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "w1 ") {
				row = l
			}
		}
		at := strings.Index(out, "MAXTHREADS")
		if at < 0 || len(row) < at || !strings.HasPrefix(row[at:], want+" ") {
			t.Errorf("den %s shows w1's maxthreads as %q, want %q:\n%s", strings.Join(args, " "), row, want, out)
		}
	}
	var rows []nodeRow
	denDB(t, db, "", "node", "list", "--json").must(t, ExitOK).decode(t, &rows)
	switch {
	case len(rows) != 1:
		t.Errorf("den node list --json: %+v", rows)
	case resumes == "" && rows[0].Quiet != nil:
		t.Errorf("den node list --json: w1 is not quiet, but says quiet %+v", *rows[0].Quiet)
	case resumes != "" && (rows[0].Quiet == nil || rows[0].Quiet.Resumes != resumes || rows[0].Quiet.At == nil || !strings.HasPrefix(rows[0].Quiet.By, "den node quiet")):
		t.Errorf("den node list --json: w1 quiet %+v, want it resuming with %s, with when and by whom", rows[0].Quiet, resumes)
	}
}
