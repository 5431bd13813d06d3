package web

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"slices"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// liveTokens makes the change token of the pages that update live: a
// short hash of what their lists and counts are made of, so that a page
// in a browser asks GET /live whether it changed, and fetches itself
// anew only when it did. A token is made at most once per interval (the
// pages' refresh), in this process, however many viewers ask: the
// others get the one made, and wait while it is being made.
//
// What goes into a token, read with the queues' cost, never the tasks':
// the census (every queue's counts by status and the last failures,
// taken no older than the pages' counts age: the pages' own counts), the
// newest task (one find by the _id index, limit 1), the queues (their
// names and limits, paused or not) and the nodes (name, state, quiet,
// maxthreads). Then, after a dot, the minute: the charts and the
// "finished lately" column move on with the clock, and a page that has
// charts fetches itself again when the minute changes.
type liveTokens struct {
	store     queue.OperatorStore
	census    *queue.CensusTaker
	countsAge time.Duration
	dead      time.Duration
	every     time.Duration
	now       func() time.Time

	// sem is held while a token is made (and while the cache is read):
	// a channel, so that a viewer that gives up waiting can leave.
	sem   chan struct{}
	made  time.Time
	token string
	err   error
}

func newLiveTokens(h *handler) *liveTokens {
	return &liveTokens{store: h.store, census: h.census, countsAge: h.countsAge, dead: h.dead, every: h.refresh, now: h.now,
		sem: make(chan struct{}, 1)}
}

// get returns the token, made at most every interval: the one made less
// than an interval ago, or a new one. A failure to make one is kept for
// the interval too, so that an outage costs no more reads than a token.
func (l *liveTokens) get(ctx context.Context) (string, error) {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-l.sem }()
	now := l.now()
	if !l.made.IsZero() && now.Sub(l.made) < l.every && !now.Before(l.made) {
		return l.token, l.err
	}
	token, err := l.make(ctx, now)
	if err != nil && ctx.Err() != nil {
		return "", err // this viewer left; the next one makes the token
	}
	l.made, l.token, l.err = now, token, err
	return token, err
}

// make reads what a token is made of and hashes it.
func (l *liveTokens) make(ctx context.Context, now time.Time) (string, error) {
	census, err := l.census.Take(ctx, l.countsAge)
	if err != nil {
		return "", fmt.Errorf("live token: %w", err)
	}
	newest, err := l.store.ListTasks(ctx, queue.TaskFilter{Limit: 1})
	if err != nil {
		return "", fmt.Errorf("live token: %w", err)
	}
	queues, bad, err := l.store.Queues(ctx)
	if err != nil {
		return "", fmt.Errorf("live token: %w", err)
	}
	nodes, err := l.store.Nodes(ctx)
	if err != nil {
		return "", fmt.Errorf("live token: %w", err)
	}
	sum := sha256.New()
	hashCensus(sum, census)
	for _, t := range newest {
		fmt.Fprintf(sum, "newest %s %d\n", t.ID.Hex(), t.Status)
	}
	for _, q := range queues {
		limit, paused := queueLimit(q)
		fmt.Fprintf(sum, "queue %s %q %q %q %q %q\n", q.ID.Hex(), q.Name, q.Plugin, q.Sort, limit, paused)
	}
	fmt.Fprintf(sum, "bad queues %d\n", len(bad))
	for _, n := range nodes {
		shown, _ := nodeLimit(n.MaxThreads, n.MaxThreadsProblem)
		fmt.Fprintf(sum, "node %q %s %t %q\n", n.Name, n.State(now, l.dead), queue.QuietOf(n.Raw) != nil, shown)
	}
	return hex.EncodeToString(sum.Sum(nil)[:12]) + "." + strconv.FormatInt(now.Unix()/60, 36), nil
}

// hashCensus writes the census's counts and failures, in the order of
// the queues' ids, but not when it was made: a census that counts the
// same as the last changes no page.
func hashCensus(sum hash.Hash, c *queue.Census) {
	ids := make([]bson.ObjectID, 0, len(c.Queues))
	for id := range c.Queues {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b bson.ObjectID) int { return cmp.Compare(a.Hex(), b.Hex()) })
	for _, id := range ids {
		counts := c.Queues[id]
		sts := make([]int, 0, len(counts.ByStatus))
		for st := range counts.ByStatus {
			sts = append(sts, st)
		}
		slices.Sort(sts)
		fmt.Fprintf(sum, "census %s", id.Hex())
		for _, st := range sts {
			fmt.Fprintf(sum, " %d:%d", st, counts.ByStatus[st])
		}
		fmt.Fprintf(sum, " other:%d\n", counts.Other)
	}
	for _, id := range c.Failures {
		fmt.Fprintf(sum, "failure %s\n", id.Hex())
	}
}

// live serves GET /live?since=TOKEN: 204 No Content when the pages'
// token is still TOKEN, else 200 with {"token": ...}; 503 with
// {"error": ...} when it cannot be made. The page's script asks it every
// refresh interval, and fetches itself anew only when the token changed.
func (h *handler) live(w http.ResponseWriter, r *http.Request) {
	token, err := h.liveTokens.get(r.Context())
	if err != nil {
		if unreachable(err) {
			h.markDown(err)
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(h.refresh.Seconds())))
		jsonError(w, http.StatusServiceUnavailable, "the page's change token cannot be read now; the page tries again")
		return
	}
	h.dbOK()
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Query().Get("since") == token {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"token": token})
}

// liveKey is the context key of the token a page's request began with.
type liveKey struct{}

// withLive makes the token before the page's reads (a token is at most an
// interval old then), so that whatever changes after it, the page's reads
// included, makes the next one differ: the page is fetched once more
// rather than a change missed. The page carries it (page.Live). A live
// fetch by a viewer not logged in gets the page rendered once for that
// token for all of them (livepages.go).
func (h *handler) withLive(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.downSince.Load() != 0 {
			next(w, r) // the page says the database is unreachable
			return
		}
		token, err := h.liveTokens.get(r.Context())
		if err != nil {
			next(w, r) // the page shows the database's failure, or works
			return
		}
		r = r.WithContext(contextWithLive(r.Context(), token))
		if h.sharable(r) {
			h.livePages.serve(w, r, token, next)
			return
		}
		next(w, r)
	}
}
