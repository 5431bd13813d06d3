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
