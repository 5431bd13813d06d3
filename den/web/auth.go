package web

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Names of the session cookie and the form fields actions read.
const (
	cookieName = "den_web_session"
	csrfField  = "csrf"
	tokenField = "token"
)

// authView is what templates know of the visitor's rights.
type authView struct {
	Enabled    bool   // a token is configured: actions exist
	Authorized bool   // this request may act
	CSRF       string // the value forms carry in the csrf field: the session's own
}

func (h *handler) authView(r *http.Request) authView {
	a := authView{Enabled: h.token != ""}
	if !a.Enabled {
		return a
	}
	if csrf, ok := h.session(r); ok {
		a.Authorized, a.CSRF = true, csrf
	} else if got, ok := bearerToken(r); ok {
		res, _ := h.checkToken(r, got)
		a.Authorized = res == tokenOK
	}
	return a
}

// same compares secrets in constant time.
func same(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// bearerToken returns the token of an Authorization: Bearer header, and
// whether there is one.
func bearerToken(r *http.Request) (string, bool) {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(v), ok
}

// session returns the CSRF value of the request's open session, if its
// cookie names one (sessions).
func (h *handler) session(r *http.Request) (string, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return "", false
	}
	return h.sessions.use(c.Value, h.now())
}

// tokenResult is what checking a presented token gave.
type tokenResult int

const (
	tokenWrong   tokenResult = iota
	tokenOK                  // the right token: accepted, whatever the address did before
	tokenLimited             // a wrong token from a limited address: 429, answered after LoginSlowdown
)

// reqAuthKey keys the request's *reqAuth in its context.
type reqAuthKey struct{}

// reqAuth remembers a request's token check, so that a request that is
// checked twice (an action, then its page) counts once.
type reqAuth struct {
	done   bool
	result tokenResult
	retry  time.Duration
}

// checkToken compares a token the request presents with the configured
// one, always: the right token is accepted at once, even from an address
// limited for guessing. A wrong token counts against the address; from a
// limited address it is answered slowly (limit.go).
func (h *handler) checkToken(r *http.Request, got string) (tokenResult, time.Duration) {
	st, _ := r.Context().Value(reqAuthKey{}).(*reqAuth)
	if st == nil {
		st = &reqAuth{}
	}
	if st.done {
		return st.result, st.retry
	}
	st.done = true
	st.result, st.retry = h.limit.check(r.Context(), clientKey(r), got, h.token, h.now(), h.sleep)
	return st.result, st.retry
}

// errLimited answers a wrong token from an address that guessed too
// often.
type errLimited struct{ retry time.Duration }

func (e errLimited) Error() string {
	return fmt.Sprintf("wrong token, and too many from your address: its wrong tokens are answered slowly for another %d seconds (the right token is always accepted)", retrySeconds(e.retry))
}

// retrySeconds rounds d up to whole seconds, for Retry-After.
func retrySeconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// tooMany answers a wrong token from a limited address: 429 with
// Retry-After, the time until its wrong tokens are no longer slowed.
func (h *handler) tooMany(w http.ResponseWriter, r *http.Request, name string, p page, e errLimited) {
	w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(e.retry)))
	h.renderStatus(w, r, http.StatusTooManyRequests, name, p)
}

// Reasons an action is refused.
var (
	errReadOnly   = errors.New("this status page is read-only: actions need web.token to be configured")
	errNoToken    = errors.New("actions need the token: log in, or send it in an Authorization: Bearer header or a token form field")
	errWrongToken = errors.New("refused: the token given is wrong")
	errCrossSite  = errors.New("refused: the request came from another site")
	errCSRF       = errors.New("refused: the form is missing its CSRF field or it is stale; reload the page and try again")
	errBadRequest = errors.New("bad request")
)

// allowed checks, on every action request, that it may act; the error
// says why not (each is a 403, but errLimited, a 429). A request that
// presents a token (a Bearer header, else a token field) is judged by it
// alone; otherwise it needs an open session and that session's CSRF value.
func (h *handler) allowed(r *http.Request) error {
	if h.token == "" {
		return errReadOnly
	}
	if crossSite(r) {
		return errCrossSite
	}
	got, presented := bearerToken(r)
	if !presented {
		got = r.PostForm.Get(tokenField)
		presented = got != ""
	}
	if presented {
		switch res, retry := h.checkToken(r, got); res {
		case tokenOK:
			return nil
		case tokenLimited:
			return errLimited{retry}
		default:
			return errWrongToken
		}
	}
	csrf, ok := h.session(r)
	if !ok {
		return errNoToken
	}
	if !same(r.PostForm.Get(csrfField), csrf) {
		return errCSRF
	}
	return nil
}

// crossSite reports whether a browser says the request comes from another
// origin (a page elsewhere posting a form here). The origin's host must be
// the request's Host, or the X-Forwarded-Host a reverse proxy sets (a page
// on another site cannot make a browser send either header).
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	if err != nil || o == "null" {
		return true
	}
	if u.Host == r.Host {
		return false
	}
	for _, fwd := range strings.Split(r.Header.Get("X-Forwarded-Host"), ",") {
		if fwd = strings.TrimSpace(fwd); fwd != "" && fwd == u.Host {
			return false
		}
	}
	return true
}

// action wraps an action's handler with the check, logging refusals (but
// not those of a limited address: the limiter logs its limit once).
func (h *handler) action(f func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, errBadRequest)
			return
		}
		// The body is read: the connection's read deadline (BodyTimeout)
		// must not cancel the action's context while it works.
		http.NewResponseController(w).SetReadDeadline(time.Time{})
		if err := h.allowed(r); err != nil {
			var lim errLimited
			if errors.As(err, &lim) {
				h.tooMany(w, r, "error", page{Title: http.StatusText(http.StatusTooManyRequests),
					Data: map[string]any{"Status": http.StatusTooManyRequests, "Error": err.Error()}}, lim)
				return
			}
			h.log.Info("web: action refused", zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr), zap.String("reason", err.Error()))
			h.fail(w, r, http.StatusForbidden, err)
			return
		}
		f(w, r)
	}
}

func (h *handler) loginPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, "login", page{Title: "Log in", Nav: "login", Data: map[string]any{"Next": safeNext(r.URL.Query().Get("next"))}})
}

// login checks the token from the form and opens a session: a random id
// in the cookie, kept server-side (session.go). Wrong tokens count
// against the client's address (limit.go).
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if h.token == "" {
		h.fail(w, r, http.StatusForbidden, errReadOnly)
		return
	}
	if crossSite(r) {
		h.fail(w, r, http.StatusForbidden, errCrossSite)
		return
	}
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, errBadRequest)
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	loginPage := func(msg string) page {
		return page{Title: "Log in", Nav: "login", Message: msg, Data: map[string]any{"Next": next}}
	}
	switch res, retry := h.checkToken(r, r.PostForm.Get(tokenField)); res {
	case tokenLimited:
		e := errLimited{retry}
		h.tooMany(w, r, "login", loginPage(strings.ToUpper(e.Error()[:1])+e.Error()[1:]+"."), e)
		return
	case tokenWrong:
		h.log.Info("web: login refused: wrong token", zap.String("remote", r.RemoteAddr))
		h.renderStatus(w, r, http.StatusForbidden, "login", loginPage("Wrong token."))
		return
	}
	id, evicted, err := h.sessions.create(h.now())
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if evicted {
		h.log.Info("web: the oldest session ended to make room for a new one", zap.Int("max_sessions", MaxSessions))
	}
	h.log.Info("web: logged in", zap.String("remote", r.RemoteAddr))
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", MaxAge: int(SessionLifetime.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r)})
	http.Redirect(w, r, withMsg(next, "logged-in"), http.StatusSeeOther)
}

// logout ends the request's session on the server and clears its cookie.
func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if crossSite(r) {
		h.fail(w, r, http.StatusForbidden, errCrossSite)
		return
	}
	if c, err := r.Cookie(cookieName); err == nil && h.sessions.revoke(c.Value) {
		h.log.Info("web: logged out", zap.String("remote", r.RemoteAddr))
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r)})
	http.Redirect(w, r, "/?msg=logged-out", http.StatusSeeOther)
}

func isHTTPS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// safeNext keeps a redirect target on this site: a path, nothing else.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/"
	}
	return next
}

// withMsg adds ?msg=key to a local path.
func withMsg(path, key string) string {
	u, err := url.Parse(path)
	if err != nil {
		return "/?msg=" + key
	}
	q := u.Query()
	q.Set("msg", key)
	u.RawQuery = q.Encode()
	return u.String()
}
