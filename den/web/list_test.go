package web_test

import (
	"html"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

var (
	taskRow  = regexp.MustCompile(`data-task="([0-9a-f]{24})"`)
	olderURL = regexp.MustCompile(`rel="next" href="([^"]+)"`)
	newerURL = regexp.MustCompile(`rel="prev" href="([^"]+)"`)
)

// rowsAndLinks reads a task list page: its task ids in order, and its
// links to the older and newer pages ("" when there is none).
func rowsAndLinks(body string) (ids []string, older, newer string) {
	for _, m := range taskRow.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	if m := olderURL.FindStringSubmatch(body); m != nil {
		older = html.UnescapeString(m[1])
	}
	if m := newerURL.FindStringSubmatch(body); m != nil {
		newer = html.UnescapeString(m[1])
	}
	return ids, older, newer
}

// Walking the task list's pages, older then newer again, with a filter,
// shows every matching task once, newest first, and no other.
func TestTaskListPages(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	a := dentest.Queue(t, db, "a", "Disbatch::Plugin::Demo", 1, "fifo")
	b := dentest.Queue(t, db, "b", "Disbatch::Plugin::Demo", 1, "fifo")
	var want []string
	for i := range 23 {
		dentest.Tasks(t, db, b, bson.D{{Key: "i", Value: i}}) // interleaved, filtered out
		for _, id := range dentest.Tasks(t, db, a, bson.D{{Key: "i", Value: i}}) {
			want = append(want, id.Hex())
		}
	}
	slices.Reverse(want) // newest first
	srv := serve(t, db, "")
	c := client(nil)
	var seen, pages []string
	next := "/tasks?queue=a&limit=5"
	for next != "" {
		pages = append(pages, next)
		if len(pages) > 10 {
			t.Fatalf("more than 10 pages of 5 for 23 tasks: %v", pages)
		}
		code, body := get(t, c, srv.URL+next)
		if code != 200 {
			t.Fatalf("%s: %d\n%s", next, code, body)
		}
		ids, older, newer := rowsAndLinks(body)
		if (newer == "") != (len(pages) == 1) {
			t.Errorf("%s: link to newer tasks %q", next, newer)
		}
		seen = append(seen, ids...)
		next = older
	}
	if !slices.Equal(seen, want) {
		t.Errorf("walking older pages showed\n%v\nwant\n%v", seen, want)
	}
	if len(pages) != 5 || !strings.Contains(pages[1], "queue=a") || !strings.Contains(pages[1], "limit=5") {
		t.Errorf("pages %v: want 5 that keep the filters", pages)
	}
	// Back from the last page to the first, through the newer links.
	_, body := get(t, c, srv.URL+pages[len(pages)-1])
	seen, _, prev := rowsAndLinks(body)
	for prev != "" {
		_, body := get(t, c, srv.URL+prev)
		var ids []string
		ids, _, prev = rowsAndLinks(body)
		seen = append(ids, seen...)
	}
	if !slices.Equal(seen, want) {
		t.Errorf("walking newer pages showed\n%v\nwant\n%v", seen, want)
	}
	for _, q := range []string{"?before=nothex", "?after=123", "?limit=501", "?before=" + want[0] + "&after=" + want[1]} {
		if code, _ := get(t, c, srv.URL+"/tasks"+q); code != 400 {
			t.Errorf("/tasks%s: %d, want 400", q, code)
		}
	}
}

// ?param=KEY=VALUE lists the tasks whose parameters.KEY is the string
// VALUE; a key that is a path or an operator, or any other hostile input,
// is refused with 400 and a message, never made into a query.
func TestTaskListParamSearch(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	q := dentest.Queue(t, db, "p", "Disbatch::Plugin::Demo", 1, "fifo")
	ids := dentest.Tasks(t, db, q, bson.D{{Key: "user", Value: "ann"}}, bson.D{{Key: "user", Value: "bob"}},
		bson.D{{Key: "user", Value: bson.D{{Key: "name", Value: "ann"}}}}, bson.D{{Key: "a", Value: bson.D{{Key: "b", Value: "x"}}}},
		bson.D{{Key: "user", Value: "a=b"}})
	srv := serve(t, db, "")
	c := client(nil)
	for _, tc := range []struct {
		param string
		want  []bson.ObjectID
	}{
		{"user=ann", ids[:1]},
		{"user=bob", ids[1:2]},
		{"user=a=b", ids[4:5]}, // the first = splits
		{"user=", nil},
		{`user={"$ne":"x"}`, nil}, // a string, not an operator
		{"nosuch=ann", nil},
	} {
		code, body := get(t, c, srv.URL+"/tasks?param="+url.QueryEscape(tc.param))
		got, _, _ := rowsAndLinks(body)
		var want []string
		for _, id := range tc.want {
			want = append(want, id.Hex())
		}
		if code != 200 || !slices.Equal(got, want) {
			t.Errorf("param %q: %d %v, want 200 %v", tc.param, code, got, want)
		}
	}
	for _, p := range []string{"$where=1", "a.b=x", "user.name=ann", "us\x00er=ann", "=ann", "user", strings.Repeat("k", 65) + "=v",
		"$gt=", "user\u00e9=ann", "user=\xff"} {
		code, body := get(t, c, srv.URL+"/tasks?param="+url.QueryEscape(p))
		if code != 400 || !strings.Contains(body, "param ") {
			t.Errorf("param %q: %d, want 400 with a message", p, code)
		}
		if got, _, _ := rowsAndLinks(body); len(got) > 0 {
			t.Errorf("param %q listed tasks %v", p, got)
		}
	}
}

// The task list shows each task's priority: the number, "-" for none (the
// default 0), and a value that is no number as what it is.
func TestTaskListShowsPriority(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	q := dentest.Queue(t, db, "p", "Disbatch::Plugin::Demo", 1, "fifo")
	none := dentest.Tasks(t, db, q, bson.D{})[0]
	high := dentest.TaskWith(t, db, q, bson.D{}, bson.E{Key: "priority", Value: int64(10)})
	low := dentest.TaskWith(t, db, q, bson.D{}, bson.E{Key: "priority", Value: -2.0})
	odd := dentest.TaskWith(t, db, q, bson.D{}, bson.E{Key: "priority", Value: "urgent"})
	srv := serve(t, db, "")
	code, body := get(t, client(nil), srv.URL+"/tasks?queue=p")
	if code != 200 {
		t.Fatalf("/tasks: %d\n%s", code, body)
	}
	for id, want := range map[bson.ObjectID]string{none: "-", high: "10", low: "-2", odd: html.EscapeString(`"urgent" (string)`)} {
		row := regexp.MustCompile(`(?s)data-task="` + id.Hex() + `".*?</tr>`).FindString(body)
		if !strings.Contains(row, `class="priority">`+want+`</td>`) {
			t.Errorf("task %s's row does not show priority %s:\n%s", id.Hex(), want, row)
		}
	}
	// The task's page too, when it has one.
	if _, body := get(t, client(nil), srv.URL+"/tasks/"+high.Hex()); !strings.Contains(body, `<dd id="priority">10</dd>`) {
		t.Errorf("the page of a task of priority 10 does not show it")
	}
	if _, body := get(t, client(nil), srv.URL+"/tasks/"+none.Hex()); strings.Contains(body, `id="priority"`) {
		t.Errorf("the page of a task without priority shows one")
	}
}
