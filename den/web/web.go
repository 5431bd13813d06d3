package web

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Options are what the handler is built from. DB is required; zero values
// of the others mean the default written next to them.
type Options struct {
	// DB is the Disbatch database.
	DB *mongo.Database
	// Log receives one line per action and per change of the database's
	// state (reads failing, working again). Default: no logging.
	Log *zap.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Sleep waits d, or until ctx ends: how the answer to a wrong token
	// from a limited address is slowed (limit.go). Default: a timer.
	Sleep func(ctx context.Context, d time.Duration)
	// Token enables actions for whoever presents it; empty: read-only.
	Token string
	// DeadNodeAfter is when a silent node is shown as dead. Default
	// queue.DefaultDeadNodeAfter.
	DeadNodeAfter time.Duration
	// Refresh is how often the overview and task list reload themselves in
	// the browser. Default 10 seconds.
	Refresh time.Duration
	// Listen is the address the page is served on, as configured
	// (host:port, such as 127.0.0.1:8080 or 0.0.0.0:8080), and Addr the
	// listener's own address (optional: it gives the IP of a listen
	// address written as a name). With Hosts, the names a reverse proxy
	// forwards (web.hosts: host, or host:port for that port only), they
	// decide which Host headers the page answers; any other gets 421 (see
	// hosts.go). With neither Listen nor Addr, the page answers only
	// localhost, 127.0.0.1, ::1 and Hosts.
	Listen string
	Addr   net.Addr
	Hosts  []string
	// Limiter, when set, counts wrong tokens per client address for the
	// page and whatever else shares it (a Guard); default: the page's own.
	Limiter *Limiter
	// Watch, when set, makes the handler ping the database every
	// ProbeEvery until it ends (see outage.go). Without it an outage is
	// noticed by the reads of the pages themselves.
	Watch context.Context
	// CountsAge is how old the task counts a page shows may be (the
	// census: queue.CensusTaker): a page that finds them older counts
	// every task again, once for every viewer. Default
	// queue.DefaultCountsAge; negative: every page counts.
	CountsAge time.Duration
	// ReadTimeout is each read request's deadline, sent to the database
	// as maxTimeMS (readbounds.go). Default ReadTimeout.
	ReadTimeout time.Duration
}

// DefaultRefresh is how often pages reload themselves unless configured.
const DefaultRefresh = 10 * time.Second

// handler serves the pages.
type handler struct {
	db      *mongo.Database
	store   queue.OperatorStore
	archive queue.ArchiveReader // tasks_archive, read only
	log     *zap.Logger
	now     func() time.Time
	sleep   func(context.Context, time.Duration)
	token   string
	dead    time.Duration
	refresh time.Duration
	pages   map[string]*template.Template
	mux     *http.ServeMux
	// dbFailing is set while database reads fail, so that the failure is
	// logged when it starts and when it clears, not on every refresh.
	dbFailing atomic.Bool
	// downSince is when the database became unreachable (Unix
	// nanoseconds), or 0 (outage.go).
	downSince atomic.Int64
	// hosts are the Host headers the page answers; sessions the open
	// logins; limit counts wrong tokens per client address.
	hosts    *hostNames
	sessions *sessions
	limit    *limiter
	// census makes the task counts the pages show, at most countsAge old.
	census    *queue.CensusTaker
	countsAge time.Duration
	// reads bounds the reads running at once; readTimeout is each one's
	// deadline (readbounds.go).
	reads       *ReadGate
	readTimeout time.Duration
	// liveTokens makes the token the pages' script asks whether they
	// changed by (live.go), once per refresh for all viewers.
	liveTokens *liveTokens
	// livePages shares a page's render among the live fetches of
	// viewers not logged in, once per token (livepages.go).
	livePages livePages
	// queueReads keeps what a queue's page reads that grows with its
	// tasks, for every viewer (queuereads.go).
	queueReads queueReadsCache
}

// New returns the status page's handler.
func New(o Options) (http.Handler, error) {
	if o.DB == nil {
		return nil, errors.New("web: no database")
	}
	h := &handler{db: o.DB, store: queue.NewStore(o.DB), archive: queue.NewArchive(o.DB), log: o.Log, now: o.Now, sleep: o.Sleep, token: o.Token,
		dead: o.DeadNodeAfter, refresh: o.Refresh, pages: map[string]*template.Template{},
		reads: NewReadGate("reads", ReadsPerClient, Reads, GateWait), readTimeout: o.ReadTimeout}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.sleep == nil {
		h.sleep = sleep
	}
	if h.dead <= 0 {
		h.dead = queue.DefaultDeadNodeAfter
	}
	if h.refresh <= 0 {
		h.refresh = DefaultRefresh
	}
	h.countsAge = max(o.CountsAge, 0)
	if o.CountsAge == 0 {
		h.countsAge = queue.DefaultCountsAge
	}
	h.census = &queue.CensusTaker{Store: h.store, By: "den web", Now: h.now}
	h.queueReads.age = queueReadsAges * h.countsAge
	if h.readTimeout <= 0 {
		h.readTimeout = ReadTimeout
	}
	h.liveTokens = newLiveTokens(h)
	var err error
	if h.hosts, err = hostsFor(o.Listen, o.Addr, o.Hosts); err != nil {
		return nil, err
	}
	h.sessions = newSessions()
	if o.Limiter == nil {
		o.Limiter = NewLimiter(h.log)
	}
	h.limit = o.Limiter.l
	for _, page := range []string{"overview", "tasks", "task", "schedules", "queue", "node", "login", "error", "bulk", "confirm"} {
		t, err := template.New(page).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/chart.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("web: parse template %s: %w", page, err)
		}
		h.pages[page] = t
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, fmt.Errorf("web: static files: %w", err)
	}
	m := http.NewServeMux()
	m.Handle("GET /static/", http.StripPrefix("/static/", cacheFor(time.Hour, http.FileServerFS(static))))
	m.HandleFunc("GET /{$}", h.withLive(h.overview))
	m.HandleFunc("GET /tasks", h.withLive(h.tasks))
	m.HandleFunc("GET /tasks/{id}", h.task)
	m.HandleFunc("GET /schedules", h.withLive(h.schedules))
	m.HandleFunc("GET /queues/{ref}", h.withLive(h.queuePage))
	m.HandleFunc("GET /nodes/{name}", h.withLive(h.nodePage))
	m.HandleFunc("GET /live", h.live)
	m.HandleFunc("GET /tasks/{id}/output", h.output)
	m.HandleFunc("GET /tasks/{id}/output.txt", h.outputText)
	m.HandleFunc("POST /tasks/{id}/cancel", h.action(h.cancel))
	m.HandleFunc("POST /tasks/{id}/retry", h.action(h.retry))
	m.HandleFunc("POST /tasks/bulk", h.action(h.bulk))
	qa := queueActions{h}
	m.HandleFunc("POST /nodes/maxthreads", h.action(nodeActions{h}.setMaxThreads))
	m.HandleFunc("POST /queues/{ref}/pause", h.action(qa.pauseQueue))
	m.HandleFunc("POST /queues/{ref}/resume", h.action(qa.resumeQueue))
	sa := scheduleActions{h}
	m.HandleFunc("POST /schedules/{name}/pause", h.action(sa.pauseSchedule))
	m.HandleFunc("POST /schedules/{name}/resume", h.action(sa.resumeSchedule))
	m.HandleFunc("POST /schedules/{name}/run", h.action(sa.runSchedule))
	m.HandleFunc("POST /schedules/{name}/delete", h.action(sa.deleteSchedule))
	na := nodeActions{h}
	m.HandleFunc("POST /nodes/{name}/quiet", h.action(na.quiet))
	m.HandleFunc("POST /nodes/{name}/resume", h.action(na.resume))
	m.HandleFunc("POST /nodes/{name}/forget", h.action(na.forget))
	m.HandleFunc("GET /login", h.loginPage)
	m.HandleFunc("POST /login", h.login)
	m.HandleFunc("POST /logout", h.logout)
	h.mux = m
	if o.Watch != nil {
		go h.watch(o.Watch)
	}
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	if !h.hosts.allows(r) {
		h.misdirected(w, r)
		return
	}
	ctx := context.WithValue(r.Context(), reqAuthKey{}, &reqAuth{})
	if isRead(r) {
		release, err := h.reads.Enter(r)
		if err != nil {
			h.refuseRead(w, r, err)
			return
		}
		defer release()
		limit := h.readTimeout
		if strings.HasSuffix(r.URL.Path, "/output.txt") {
			limit = DownloadTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
		// The context's deadline bounds the read. A read has no body, so
		// the connection gets no read deadline while it runs: net/http's
		// background read, timing out, would cancel the connection's
		// context, and with it every later request on that keep-alive
		// connection.
		http.NewResponseController(w).SetReadDeadline(time.Time{})
	} else {
		// An action's body (a form) arrives within BodyTimeout.
		http.NewResponseController(w).SetReadDeadline(time.Now().Add(BodyTimeout))
	}
	if h.downSince.Load() != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, outageWait)
		defer cancel()
	}
	h.mux.ServeHTTP(w, r.WithContext(ctx))
}

// isRead reports whether a request is one of the page's reads, which the
// read gate bounds: a GET or HEAD of anything but the static files.
func isRead(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && !strings.HasPrefix(r.URL.Path, "/static/")
}

// refuseRead answers a read the gate did not let in: nothing when its
// client went away, else 429 or 503 with Retry-After.
func (h *handler) refuseRead(w http.ResponseWriter, r *http.Request, err error) {
	var busy *BusyError
	if !errors.As(err, &busy) {
		h.log.Debug("web: a read's client went away while it waited for its turn", zap.String("path", r.URL.Path), zap.Error(err))
		return
	}
	w.Header().Set("Retry-After", busy.RetryAfter())
	h.errorPage(w, r, busy.Status(), busy)
}

func cacheFor(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", fmt.Sprintf("max-age=%d", int(d.Seconds())))
		next.ServeHTTP(w, r)
	})
}

// page is what every template gets: the page's own data and the frame.
type page struct {
	Title   string
	Nav     string // which menu entry is current
	Auth    authView
	Refresh int // seconds; 0: the page does not update itself
	// Live is the change token the page was made after (live.go): its
	// script fetches it anew when GET /live says another.
	Live    string
	Message string
	Outage  string // the banner while the database is unreachable
	Now     time.Time
	Data    any
}

// render writes a page with status 200.
func (h *handler) render(w http.ResponseWriter, r *http.Request, name string, p page) {
	h.renderStatus(w, r, http.StatusOK, name, p)
}

func (h *handler) renderStatus(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Auth = h.authView(r)
	p.Now = h.now()
	if p.Refresh > 0 {
		p.Live, _ = r.Context().Value(liveKey{}).(string)
	}
	if p.Outage = h.outageText(); p.Outage != "" && status < 400 {
		status = http.StatusServiceUnavailable // a page that reads nothing, during an outage
	}
	if p.Message == "" {
		p.Message = messages[r.URL.Query().Get("msg")]
	}
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		h.log.Error("web: render page", zap.String("page", name), zap.Error(err))
		http.Error(w, "den web: cannot render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "5")
	}
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// fail shows an error page. A database error is told apart
// (DBFailureOf): a request its client abandoned is logged at debug and
// answered nothing; one that ran out of time gets 503 with Retry-After,
// for itself alone; a database that cannot be reached starts the outage
// (outage.go). Failing reads are logged when they start failing (and
// dbOK logs when they work again).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	if status >= 500 {
		kind := DBFailureOf(r.Context(), err)
		if kind == DBSlow && h.downSince.Load() != 0 {
			kind = DBDown // an outage's reads are cut short by outageWait
		}
		switch kind {
		case DBAbandoned:
			h.log.Debug("web: a request's client went away before its answer", zap.String("path", r.URL.Path), zap.Error(err))
			return
		case DBSlow:
			h.failing(err)
			msg, retry := SlowAnswer(h.readTimeout)
			w.Header().Set("Retry-After", retry)
			h.errorPage(w, r, http.StatusServiceUnavailable, errors.New(msg))
			return
		case DBDown:
			h.markDown(err)
			w.Header().Set("Retry-After", "5")
			if wantsJSON(r) || isJSONRead(r) {
				jsonError(w, http.StatusServiceUnavailable, h.outageText())
				return
			}
			err = errors.New("the database does not answer; den web retries, and this page works again once it does")
			status = http.StatusServiceUnavailable
		}
		h.failing(err)
	}
	h.errorPage(w, r, status, err)
}

// errorPage answers an error: JSON to a script's action and to the
// output's JSON, else the error page.
func (h *handler) errorPage(w http.ResponseWriter, r *http.Request, status int, err error) {
	if (r.Method == http.MethodPost && wantsJSON(r)) || isJSONRead(r) {
		jsonError(w, status, err.Error())
		return
	}
	h.renderStatus(w, r, status, "error", page{Title: http.StatusText(status), Data: map[string]any{"Status": status, "Error": err.Error()}})
}

// isJSONRead reports whether a read is of the output's JSON, which the
// task page polls.
func isJSONRead(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/output")
}

// failing logs, once until dbOK, that database reads fail.
func (h *handler) failing(err error) {
	if h.dbFailing.CompareAndSwap(false, true) {
		h.log.Warn("web: database reads failing; pages show the error until they work again", zap.Error(err))
	}
}

// dbOK records that the database answered.
func (h *handler) dbOK() {
	h.downSince.Store(0)
	if h.dbFailing.CompareAndSwap(true, false) {
		h.log.Info("web: database reads work again")
	}
}

// messages are the notes an action's redirect may ask a page to show
// (?msg=KEY); unknown keys show nothing.
var messages = map[string]string{
	"cancel-requested":     "Cancel requested: a queued task never starts; a running one is stopped by its node.",
	"already-ended":        "The task had already ended; nothing was changed.",
	"retried":              "The task is queued again.",
	"not-retried":          "The task was not retried: it is queued or running, or it changed meanwhile.",
	"maxthreads-set":       "The node's maxthreads is set; the node applies it on its next pass.",
	"queue-paused":         "The queue is paused: no node starts its tasks until it is resumed.",
	"queue-resumed":        "The queue is resumed with the limits it had.",
	"queue-already-paused": "The queue was already paused; nothing was changed.",
	"queue-not-paused":     "The queue was not paused; nothing was changed.",
	"schedule-paused":      "The schedule is paused: it inserts no task until it is resumed.",
	"schedule-resumed":     "The schedule is resumed, from its first time after now.",
	"schedule-run":         "The schedule's task is inserted, now; its next time is unchanged.",
	"schedule-run-already": "The schedule's task for this second was inserted already; nothing more was.",
	"schedule-deleted":     "The schedule is deleted; the tasks it inserted stay.",
	"node-quiet":           "The node is quiet: it claims nothing new; the tasks it runs go on to their end.",
	"node-resumed":         "The node is resumed with the maxthreads it had; it claims on its next pass.",
	"node-already-quiet":   "The node was quiet already; nothing was changed.",
	"node-not-quiet":       "The node was not quiet; nothing was changed.",
	"node-forgotten":       "The node's document is removed; it is listed again if it starts.",
	"logged-in":            "Logged in: actions are enabled in this browser.",
	"logged-out":           "Logged out.",
}
