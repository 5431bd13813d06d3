package web_test

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
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
