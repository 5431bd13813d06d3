package dci

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/den-project/den/den/web"
	"github.com/den-project/den/queue"
)

// Options are what the handler is built from. DB and Guard are required.
type Options struct {
	// DB is the Disbatch database.
	DB *mongo.Database
	// Guard checks the Host header and the token, sharing den web's
	// limit on wrong tokens (den/web.Guard).
	Guard *web.Guard
	// Log gets one line per write and per refusal. Default: nowhere.
	Log *zap.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Plugins are plugins GET /plugins lists and queues may use besides
	// those live den nodes say they serve: the plugins of Perl nodes,
	// which do not say (web.dci_plugins, or a Disbatch config.json's
	// plugins).
	Plugins []string
	// DeadNodeAfter is how long a node's document may go unwritten and
	// its plugins still count. Default queue.DefaultDeadNodeAfter.
	DeadNodeAfter time.Duration
	// Batch is how many tasks one insert carries (default 1000), each
	// batch counted in its queue's count_todo and count_total.
	Batch int
	// CountsAge is how old the task counts GET /queues answers with may
	// be (the census, shared with den web's pages: queue.CensusTaker).
	// Default queue.DefaultCountsAge; negative: every request counts.
	CountsAge time.Duration
	// ReadTimeout is a read's deadline, sent to the database as
	// maxTimeMS (bounds.go). Default ReadTimeout.
	ReadTimeout time.Duration
}

// DefaultBatch is how many tasks one insert carries unless configured.
const DefaultBatch = 1000

// Realm is the basic-auth realm Disbatch's client, bin/disbatch, sends its
// --username and --password for.
const Realm = "disbatch"

type handler struct {
	db      *mongo.Database
	store   queue.OperatorStore
	guard   *web.Guard
	log     *zap.Logger
	now     func() time.Time
	plugins []string
	dead    time.Duration
	batch   int
	// census makes the counts GET /queues answers with, at most
	// countsAge old.
	census    *queue.CensusTaker
	countsAge time.Duration
	// reads and searches bound the reads and the searches running at
	// once; readTimeout is a read's deadline; failing is set while the
	// database fails reads (bounds.go).
	reads, searches *web.ReadGate
	readTimeout     time.Duration
	failing         atomic.Bool
}

// New returns the Disbatch web API's handler.
func New(o Options) (http.Handler, error) {
	if o.DB == nil {
		return nil, errors.New("dci: no database")
	}
	if o.Guard == nil {
		return nil, errors.New("dci: no guard")
	}
	h := &handler{db: o.DB, store: queue.NewStore(o.DB), guard: o.Guard, log: o.Log, now: o.Now, plugins: o.Plugins,
		dead: o.DeadNodeAfter, batch: o.Batch, readTimeout: o.ReadTimeout,
		reads:    web.NewReadGate("reads", web.ReadsPerClient, web.Reads, web.GateWait),
		searches: web.NewReadGate("searches", SearchesPerClient, Searches, web.GateWait)}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.dead <= 0 {
		h.dead = queue.DefaultDeadNodeAfter
	}
	h.countsAge = max(o.CountsAge, 0)
	if o.CountsAge == 0 {
		h.countsAge = queue.DefaultCountsAge
	}
	h.census = &queue.CensusTaker{Store: h.store, By: "den web (DCI)", Now: h.now}
	if h.batch <= 0 {
		h.batch = DefaultBatch
	}
	if h.readTimeout <= 0 {
		h.readTimeout = ReadTimeout
	}
	return h, nil
}

// route is one of the Perl web API's routes: a handler, whether it writes
// (and so needs the token) or searches (and so is bounded as a search),
// and its body limit.
type route struct {
	fn     func(w http.ResponseWriter, r *http.Request, p params, args ...string)
	write  bool
	search bool
	limit  int64
	args   []string
}

// match finds the route of a request, as Disbatch::Web's routes match the
// path (in their order: /tasks/search before /tasks/:queue before
// /tasks/:queue/:collection), without the query. A path's escapes are
// decoded; /tasks/:queue/:collection is split before, so that a queue
// named a/b is /tasks/a%2Fb. HEAD is GET.
func (h *handler) match(method string, u *url.URL) (route, bool) {
	path := u.Path
	if method == http.MethodHead {
		method = http.MethodGet
	}
	read := func(fn func(http.ResponseWriter, *http.Request, params, ...string), args ...string) (route, bool) {
		return route{fn: fn, limit: MaxReadBody, args: args}, true
	}
	search := func(fn func(http.ResponseWriter, *http.Request, params, ...string)) (route, bool) {
		return route{fn: fn, search: true, limit: MaxReadBody}, true
	}
	write := func(fn func(http.ResponseWriter, *http.Request, params, ...string), limit int64, args ...string) (route, bool) {
		return route{fn: fn, write: true, limit: limit, args: args}, true
	}
	rest := func(prefix string) (string, bool) {
		s, ok := strings.CutPrefix(path, prefix)
		return s, ok && s != ""
	}
	switch method {
	case http.MethodGet:
		switch path {
		case "/nodes":
			return read(h.getNodes)
		case "/plugins":
			return read(h.getPlugins)
		case "/queues":
			return read(h.getQueues)
		case "/scheduler-json":
			return read(h.schedulerJSON)
		case "/queue-prototypes-json":
			return read(h.queuePrototypesJSON)
		}
		if node, ok := rest("/nodes/"); ok {
			return read(h.getNode, node)
		}
		if q, ok := rest("/queues/"); ok {
			return read(h.getQueue, q)
		}
	case http.MethodPost:
		switch path {
		case "/queues":
			return write(h.postQueues, MaxBody)
		case "/tasks/search":
			return search(h.searchTasks)
		case "/set-queue-attr-json":
			return write(h.setQueueAttrJSON, MaxBody)
		case "/start-queue-json":
			return write(h.startQueueJSON, MaxBody)
		case "/delete-queue-json":
			return write(h.deleteQueueJSON, MaxBody)
		case "/queue-create-tasks-json":
			return write(h.queueCreateTasksJSON, MaxTasksBody)
		case "/queue-create-tasks-from-query-json":
			return write(h.queueCreateTasksFromQueryJSON, MaxBody)
		case "/search-tasks-json":
			return search(h.searchTasksJSON)
		}
		if node, ok := rest("/nodes/"); ok {
			return write(h.postNode, MaxBody, node)
		}
		if q, ok := rest("/queues/"); ok {
			return write(h.postQueue, MaxBody, q)
		}
		if t, ok := strings.CutPrefix(u.EscapedPath(), "/tasks/"); ok && t != "" {
			qe, ce, found := strings.Cut(t, "/")
			q, err1 := url.PathUnescape(qe)
			coll, err2 := url.PathUnescape(ce)
			switch {
			case err1 != nil || err2 != nil:
			case !found:
				return write(h.postTasks, MaxTasksBody, q)
			case q != "" && coll != "":
				return write(h.postTasksFromCollection, MaxBody, q, coll)
			}
		}
	case http.MethodDelete:
		if q, ok := rest("/queues/"); ok {
			return write(h.deleteQueue, MaxBody, q)
		}
	}
	return route{}, false
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	// The body arrives within web.BodyTimeout, or the connection ends; a
	// write with the token gets WriteBodyTimeout.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(web.BodyTimeout))
	if !h.guard.Host(w, r) {
		return
	}
	rt, ok := h.match(r.Method, r.URL)
	if !ok {
		sendJSON(w, http.StatusNotFound, obj{{"error", "not found: " + r.Method + " " + r.URL.Path + " is no route of the Disbatch web API"}})
		return
	}
	if rt.write {
		if !h.allowed(w, r) {
			return
		}
		rc.SetReadDeadline(time.Now().Add(WriteBodyTimeout))
	} else {
		release, ok := h.enter(w, r, rt)
		if !ok {
			return
		}
		defer release()
	}
	lim := writeJSON
	if !rt.write {
		lim = readJSON
	}
	p, err := parseParams(w, r, rt.limit, lim)
	if err != nil { // what is left of its body is discarded within the same time
		var tl errTooLarge
		if errors.As(err, &tl) {
			sendJSON(w, http.StatusRequestEntityTooLarge, obj{{"error", err.Error()}})
			return
		}
		sendJSON(w, http.StatusBadRequest, obj{{"error", err.Error()}})
		return
	}
	// The body is read: from now on the context's deadline bounds the
	// request. The connection keeps no read deadline, which would have
	// net/http's background read, timing out, cancel the connection's
	// context and every later request on that keep-alive connection.
	rc.SetReadDeadline(time.Time{})
	if rt.write {
		h.log.Info("dci: write", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr))
		rt.fn(w, r, p, rt.args...)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.readTimeout)
	defer cancel()
	sw := &statusWriter{ResponseWriter: w}
	rt.fn(sw, r.WithContext(ctx), p, rt.args...)
	if sw.status < 500 && h.failing.CompareAndSwap(true, false) {
		h.log.Info("dci: database reads work again")
	}
}

// allowed checks a write's credentials: the token as the basic-auth
// password (any user name, as bin/disbatch --username --password sends
// it) or in an Authorization: Bearer header. Without them, or with a
// wrong one, 401 asks for basic auth in the realm disbatch; a limited
// address's wrong token gets 429; with no token configured, and from
// another site's page, 403.
func (h *handler) allowed(w http.ResponseWriter, r *http.Request) bool {
	refuse := func(status int, msg string) bool {
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Basic realm="`+Realm+`"`)
		}
		sendJSON(w, status, obj{{"error", msg}})
		return false
	}
	if !h.guard.HasToken() {
		h.log.Info("dci: write refused: no web.token", zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr))
		return refuse(http.StatusForbidden, "this den web is read-only: writes need web.token to be configured")
	}
	if web.CrossSite(r) {
		h.log.Info("dci: write refused: from another site", zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr))
		return refuse(http.StatusForbidden, "refused: the request came from another site's page")
	}
	got, presented := credentials(r)
	if !presented {
		return refuse(http.StatusUnauthorized, "writes need credentials: web.token as the basic-auth password (disbatch --username any --password TOKEN), or an Authorization: Bearer TOKEN header")
	}
	c := h.guard.Check(r, got)
	switch {
	case c.OK:
		return true
	case c.Limited:
		w.Header().Set("Retry-After", strconv.Itoa(c.RetryAfter()))
		return refuse(http.StatusTooManyRequests, fmt.Sprintf("wrong token, and too many from your address: its wrong tokens are answered slowly for another %d seconds (the right token is always accepted)", c.RetryAfter()))
	}
	h.log.Info("dci: write refused: wrong token", zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr))
	return refuse(http.StatusUnauthorized, "refused: the token given is wrong")
}

// credentials returns the token a request presents: a Bearer token, or
// the password of basic auth.
func credentials(r *http.Request) (string, bool) {
	a := r.Header.Get("Authorization")
	if v, ok := strings.CutPrefix(a, "Bearer "); ok {
		return strings.TrimSpace(v), true
	}
	if v, ok := strings.CutPrefix(a, "Basic "); ok {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
		if err != nil {
			return "", true // presented, and wrong
		}
		_, pass, _ := strings.Cut(string(raw), ":")
		return pass, true
	}
	return "", false
}

// sendJSON answers status with v as JSON.
func sendJSON(w http.ResponseWriter, status int, v any) {
	sendJSONPretty(w, status, v, false)
}

func sendJSONPretty(w http.ResponseWriter, status int, v any, pretty bool) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(encodeJSON(v, pretty))
}

// dbError answers a database error: nothing when the request's client
// went away, 503 with Retry-After when the database did not answer in
// time or cannot be reached, else 500 (the Perl web API answered 400
// with the driver's message; den logs it and says what failed).
func (h *handler) dbError(w http.ResponseWriter, r *http.Request, what string, err error) {
	if h.dbFailed(w, r, err) {
		return
	}
	h.log.Warn("dci: "+what, zap.Error(err))
	sendJSON(w, http.StatusInternalServerError, obj{{"error", what + ": " + err.Error()}})
}
