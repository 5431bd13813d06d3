package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/web"
)

// commandCounter counts the commands the database gets, by collection.
type commandCounter struct {
	mu sync.Mutex
	by map[string]int
}

func (c *commandCounter) rule() dentest.Rule {
	return dentest.Rule{Match: func(docs []bson.Raw) bool {
		elems, err := docs[0].Elements()
		if err != nil || len(elems) == 0 {
			return false
		}
		coll, _ := elems[0].Value().StringValueOK()
		c.mu.Lock()
		c.by[elems[0].Key()+" "+coll]++
		c.mu.Unlock()
		return false
	}}
}

// take returns the counts since the last take, and their total.
func (c *commandCounter) take() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	by, n := c.by, 0
	for _, k := range by {
		n += k
	}
	c.by = map[string]int{}
	return by, n
}

// liveAnswer is what GET /live?since=token answered: its status and the
// token it gives (empty with 204).
func liveAnswer(t *testing.T, base, since string) (int, string) {
	t.Helper()
	r, err := http.Get(base + "/live?since=" + since)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	var o struct{ Token string }
	if r.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &o); err != nil || o.Token == "" {
			t.Fatalf("GET /live: 200 with %q", b)
		}
	}
	return r.StatusCode, o.Token
}

// pageToken is the change token a page was made after (data-live).
var pageToken = regexp.MustCompile(`<main id="live" data-refresh="\d+" data-live="([^"]*)">`)

// The pages' live updates cost the same however many look: N viewers
// that each ask GET /live several times within an interval cost the
// database what one viewer costs (one token, made once, its reads those
// of the queues, never of every task but the census's count once per
// counts age), and nothing more within the interval. While nothing
// changes every viewer gets 204; a task inserted changes the token at the
// next interval, for every viewer alike; a page carries the token it was
// made after.
func TestLiveTokenOncePerInterval(t *testing.T) {
	t.Parallel()
	counter := &commandCounter{by: map[string]int{}}
	p := dentest.Faults(t, 1, counter.rule())
	direct := dentest.DB(t)
	db := p.Client(t).Database(direct.Name())
	q := dentest.Queue(t, direct, "q", "P", 1, "fifo")
	dentest.Tasks(t, direct, q, bson.D{}, bson.D{})
	clk := newClock()
	const every = 10 * time.Second
	srv := serveWith(t, web.Options{DB: db, Log: zaptest.NewLogger(t), Now: clk.now, Refresh: every, CountsAge: every})

	_, body := get(t, http.DefaultClient, srv.URL+"/")
	m := pageToken.FindStringSubmatch(body)
	if m == nil || m[1] == "" {
		t.Fatalf("the overview carries no change token:\n%s", body)
	}
	token := m[1]
	if code, _ := liveAnswer(t, srv.URL, token); code != http.StatusNoContent {
		t.Fatalf("GET /live with the overview's own token: %d, want 204", code)
	}

	// viewers polls /live with n viewers at once, each asking three
	// times, and returns the statuses they got and the commands the
	// database got meanwhile.
	viewers := func(n int, since string) (map[int]int, map[string]int, int) {
		counter.take()
		var mu sync.Mutex
		got := map[int]int{}
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				for range 3 {
					code, tok := liveAnswer(t, srv.URL, since)
					mu.Lock()
					got[code]++
					mu.Unlock()
					if code == http.StatusOK && !strings.HasPrefix(tok, strings.Split(since, ".")[0]) {
						mu.Lock()
						got[-1]++ // the data changed (not only the minute)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		by, total := counter.take()
		return got, by, total
	}

	got, by, total := viewers(20, token)
	if total != 0 || got[http.StatusNoContent] != 60 {
		t.Errorf("20 viewers within the interval: %v answers, %d commands %v; want 60×204 and none", got, total, by)
	}

	// Each interval a little longer than the counts' age: each token
	// takes a new census, the costliest interval there is.
	step := every + time.Second
	clk.add(step)
	_, one, oneTotal := viewers(1, token)
	clk.add(step)
	got, by, total = viewers(20, token)
	t.Logf("an interval's token: one viewer %d commands %v; 20 viewers %d commands %v", oneTotal, one, total, by)
	if total != oneTotal || total == 0 {
		t.Errorf("20 viewers in an interval cost %d commands %v; one costs %d %v: want the same", total, by, oneTotal, one)
	}
	if got[-1] != 0 || got[http.StatusOK]+got[http.StatusNoContent] != 60 {
		t.Errorf("nothing changed, yet 20 viewers got %v", got)
	}
	// Of tasks, only the census's count (one aggregation), its last
	// failures and the newest task (a find each, limit 10 and 1).
	if n := by["aggregate tasks"] + by["find tasks"]; n != 3 {
		t.Errorf("an interval's token sent %v; want an aggregate and 2 finds of tasks", by)
	}

	dentest.Tasks(t, direct, q, bson.D{})
	got, _, _ = viewers(20, token)
	if got[-1] != 0 {
		t.Errorf("within the interval the inserted task changes nothing yet, got %v", got)
	}
	clk.add(step)
	got, by, total = viewers(20, token)
	if got[-1] != 60 {
		t.Errorf("the interval after a task was inserted, 20 viewers' 60 asks got %v; want 60 new tokens", got)
	}
	if total != oneTotal+1 { // and the census's write of the queue's new counts
		t.Errorf("20 viewers in an interval that changed cost %d commands %v; want %d", total, by, oneTotal+1)
	}
}

// When the token changes, every open copy of a page fetches itself at
// once: for viewers not logged in (X-Den-Live, as the page's script
// sends it) the page is read and rendered once for all of them, for that
// token; a logged-in viewer's page (its own CSRF field) and a reload
// (no X-Den-Live) are read for each.
func TestLivePagesRenderedOncePerToken(t *testing.T) {
	t.Parallel()
	counter := &commandCounter{by: map[string]int{}}
	p := dentest.Faults(t, 1, counter.rule())
	direct := dentest.DB(t)
	db := p.Client(t).Database(direct.Name())
	q := dentest.Queue(t, direct, "q", "P", 1, "fifo")
	dentest.Tasks(t, direct, q, bson.D{}, bson.D{})
	clk := newClock()
	srv := serveWith(t, web.Options{DB: db, Log: zaptest.NewLogger(t), Now: clk.now, Token: testToken, Refresh: 10 * time.Second, CountsAge: time.Minute})
	list := srv.URL + "/tasks?queue=" + q.Hex()

	// fetch gets the list with n viewers at once, with the header given
	// (a name and a value, or none), and returns the commands the
	// database got meanwhile, and the pages' tokens.
	fetch := func(n int, header ...string) (int, map[string]bool) {
		counter.take()
		var mu sync.Mutex
		tokens := map[string]bool{}
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodGet, list, nil)
				for i := 0; i+1 < len(header); i += 2 {
					req.Header.Set(header[i], header[i+1])
				}
				r, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				defer r.Body.Close()
				b, _ := io.ReadAll(r.Body)
				m := pageToken.FindSubmatch(b)
				if r.StatusCode != http.StatusOK || m == nil || !strings.Contains(string(b), `id="tasklist"`) {
					t.Errorf("GET %s %v: %d\n%s", list, header, r.StatusCode, b)
					return
				}
				mu.Lock()
				tokens[string(m[1])] = true
				mu.Unlock()
			})
		}
		wg.Wait()
		_, total := counter.take()
		return total, tokens
	}

	fetch(1) // the token, made
	one, _ := fetch(1)
	if one == 0 {
		t.Fatal("a load of the task list sent the database nothing")
	}
	if n, _ := fetch(20); n != 20*one {
		t.Errorf("20 loads of the task list (no X-Den-Live) sent %d commands; one sends %d: want each read anew", n, one)
	}
	shared, tokens := fetch(20, "X-Den-Live", "1")
	if shared != one || len(tokens) != 1 {
		t.Errorf("20 live fetches of the task list sent %d commands (one load sends %d), with tokens %v: want one render for all", shared, one, tokens)
	}
	if n, _ := fetch(20, "X-Den-Live", "1"); n != 0 {
		t.Errorf("20 more live fetches with the same token sent %d commands; want none", n)
	}
	if n, _ := fetch(20, "X-Den-Live", "1", "Authorization", "Bearer "+testToken); n != 20*one {
		t.Errorf("20 live fetches of logged-in viewers sent %d commands; want each read (%d)", n, 20*one)
	}
	// A new token: the next live fetches render the page once again.
	clk.add(10 * time.Second)
	dentest.Tasks(t, direct, q, bson.D{})
	n, tokens := fetch(20, "X-Den-Live", "1")
	t.Logf("a load of the task list: %d commands; 20 live fetches after a change: %d, with the token's", one, n)
	if len(tokens) != 1 || n > one+5 {
		t.Errorf("20 live fetches after a change sent %d commands (a load %d, a token 5), tokens %v", n, one, tokens)
	}

	// A logged-in viewer's page (its actions) is never what another gets:
	// the logged-in fetch comes first with a new token, then a viewer's
	// who is not logged in.
	clk.add(10 * time.Second)
	dentest.Tasks(t, direct, q, bson.D{})
	body := func(header ...string) string {
		req, _ := http.NewRequest(http.MethodGet, list, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return string(b)
	}
	if b := body("X-Den-Live", "1", "Authorization", "Bearer "+testToken); !strings.Contains(b, `id="bulk-cancel"`) {
		t.Fatalf("the logged-in viewer's task list has no bulk actions:\n%s", b)
	}
	if b := body("X-Den-Live", "1"); strings.Contains(b, `id="bulk-cancel"`) {
		t.Errorf("a viewer not logged in got the logged-in viewer's page, with its actions:\n%s", b)
	}
}
