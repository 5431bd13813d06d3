package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A queue's rate limit shows beside its limit on the overview, and in its
// page's settings (none when it has none).
func TestRateLimitShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.db, "")
	c := client(nil)
	_, page := get(t, c, srv.URL+"/queues/"+f.queue.Hex())
	if !strings.Contains(page, `<td id="rate-limit">none</td>`) {
		t.Errorf("a queue without a rate limit: its page does not say none:\n%s", page)
	}
	dentest.Update(t, f.db.Collection("queues"), bson.D{{Key: "_id", Value: f.queue}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "rate_limit", Value: bson.D{{Key: "starts", Value: 2}, {Key: "per", Value: 10}}}}}})
	_, overview := get(t, c, srv.URL+"/")
	row := between(t, overview, `data-queue="resize"`, "</tr>")
	if !strings.Contains(row, `<small class="rate-limit" title="rate limit: at most 2 of its tasks start in any 10s, on all den nodes together">rate 2/10s</small>`) {
		t.Errorf("the overview's row of a queue limited to 2/10s:\n%s", row)
	}
	_, page = get(t, c, srv.URL+"/queues/"+f.queue.Hex())
	if !strings.Contains(page, `<td id="rate-limit"><span class="rate-limit">2/10s</span>`) {
		t.Errorf("the page of a queue limited to 2/10s:\n%s", page)
	}
}

// between is the part of s from the first from to the next to after it.
func between(t *testing.T, s, from, to string) string {
	t.Helper()
	i := strings.Index(s, from)
	if i < 0 {
		t.Fatalf("no %q in:\n%s", from, s)
	}
	j := strings.Index(s[i:], to)
	if j < 0 {
		return s[i:]
	}
	return s[i : i+j]
}

// A quiet node shows quiet, with the maxthreads it resumes with, in the
// maxthreads column of the overview (where the form that sets maxthreads
// would put it at once out of quiet) and on its page, as den node list
// shows it; a node whose maxthreads was set since it was quieted claims
// again and shows that maxthreads.
func TestQuietNodeShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.db, testToken)
	jar, _ := loggedIn(t, srv.URL)
	c := client(jar)
	cell := func() (overview, page string) {
		_, body := get(t, c, srv.URL+"/")
		row := between(t, body, `data-node="n1"`, "</tr>")
		_, body = get(t, c, srv.URL+"/nodes/n1")
		return between(t, row, `data-label="Maxthreads"`, "</td>"), between(t, body, `id="maxthreads"`, "</td>")
	}
	overview, page := cell()
	if strings.Contains(overview+page, "quiet") || !strings.Contains(overview, `name="maxthreads"`) {
		t.Errorf("a node that is not quiet: overview %q, page %q", overview, page)
	}
	if _, err := queue.NewStore(f.db).QuietNode(dentest.Context(t), "n1", "den node quiet (test)", time.Now()); err != nil {
		t.Fatal(err)
	}
	overview, page = cell()
	if !strings.Contains(overview, `<a class="status paused quiet" href="/nodes/n1" title="quiet since `) || !strings.Contains(overview, "by den node quiet (test); resumes with maxthreads none") ||
		!strings.Contains(overview, "<small>resumes: none</small>") || strings.Contains(overview, `name="maxthreads"`) {
		t.Errorf("the overview's maxthreads of a quiet node: %q", overview)
	}
	if !strings.Contains(page, `<span class="status paused quiet">quiet</span> <small>resumes: none</small>`) {
		t.Errorf("the node page's maxthreads of a quiet node: %q", page)
	}
	dentest.Update(t, f.db.Collection("nodes"), bson.D{{Key: "node", Value: "n1"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: 3}}}})
	overview, page = cell()
	if strings.Contains(overview+page, "quiet") || !strings.Contains(overview, `value="3"`) || !strings.Contains(page, ">3") {
		t.Errorf("a quiet node given maxthreads 3 since: overview %q, page %q", overview, page)
	}
}

// A force-deleted queue's tasks are found on the pages: the overview
// counts them under "Deleted queues" (from the census), linking to the
// task list by the queue's id; that list shows them, names the queue in
// its filter, says what to do, and offers archive and purge but not
// retry; the archive takes the ended one.
func TestDeletedQueueOnThePages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	gone := dentest.Queue(t, f.db, "gone", "Disbatch::Plugin::Command", 1, "fifo")
	ids := dentest.Tasks(t, f.db, gone, bson.D{{Key: "n", Value: 1}}, bson.D{{Key: "n", Value: 2}})
	dentest.Update(t, f.db.Collection("tasks"), bson.D{{Key: "_id", Value: ids[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: queue.StatusSucceeded}}}})
	dentest.Delete(t, f.db.Collection("queues"), bson.D{{Key: "_id", Value: gone}}) // as den queue delete --force does
	ref := gone.Hex()
	srv := serve(t, f.db, testToken)
	jar, _ := loggedIn(t, srv.URL)
	c := client(jar)

	_, overview := get(t, c, srv.URL+"/")
	section := between(t, overview, `id="deleted-queues"`, "</table>")
	row := between(t, section, `data-queue-id="`+ref+`"`, "</tr>")
	for _, want := range []string{`href="/tasks?queue=` + ref + `"`, `data-label="Todo" class="num">1<`, `data-label="Done" class="num">1<`, `data-label="Running" class="num">0<`} {
		if !strings.Contains(row, want) {
			t.Errorf("the overview's deleted queue lacks %q:\n%s", want, row)
		}
	}
	if strings.Contains(section, f.queue.Hex()) {
		t.Errorf("the overview counts a queue that has its document as deleted:\n%s", section)
	}

	_, list := get(t, c, srv.URL+"/tasks?queue="+ref)
	for _, want := range []string{`id="deleted-queue"`, `<option value="` + ref + `" selected>deleted queue ` + ref + `</option>`,
		`data-task="` + ids[0].Hex() + `"`, `data-task="` + ids[1].Hex() + `"`, `id="bulk-archive"`, `id="bulk-purge"`} {
		if !strings.Contains(list, want) {
			t.Errorf("the task list of the deleted queue lacks %q:\n%s", want, list)
		}
	}
	if n := strings.Count(list, `<span class="muted deleted-queue"`); n != 2 || strings.Contains(list, `id="bulk-retry"`) {
		t.Errorf("the task list of the deleted queue: %d tasks marked, retry offered %v", n, strings.Contains(list, `id="bulk-retry"`))
	}
	_, list = get(t, c, srv.URL+"/tasks?queue="+f.queue.Hex())
	if strings.Contains(list, "deleted") || !strings.Contains(list, `id="bulk-retry"`) {
		t.Errorf("the task list of a queue that has its document speaks of a deleted one, or offers no retry")
	}

	bearer := http.Header{"Authorization": {"Bearer " + testToken}}
	if code, body := bulkPost(t, srv.URL, url.Values{"action": {"retry"}, "queue": {ref}}, bearer); code != 400 || !strings.Contains(body, "cannot run again") {
		t.Errorf("bulk retry of a deleted queue's tasks: %d %s", code, body)
	}
	form := url.Values{"action": {"archive"}, "queue": {ref}}
	_, body := bulkPost(t, srv.URL, form, bearer)
	first := decodeBulk(t, body)
	form.Set("upto", first.Upto)
	form.Set("confirm", "1")
	if code, body := bulkPost(t, srv.URL, form, bearer); code != 200 || first.Matched != 1 || decodeBulk(t, body).Done != 1 {
		t.Fatalf("archive of the deleted queue's ended task: first %s, then %d %s", first.Upto, code, body)
	}
	if dentest.Count(t, f.db.Collection(queue.ArchiveCollection), bson.D{{Key: "_id", Value: ids[0]}}) != 1 {
		t.Error("the deleted queue's ended task is not in tasks_archive")
	}
}
