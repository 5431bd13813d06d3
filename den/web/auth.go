package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Names of the session cookie and the form fields actions read.
const (
	cookieName = "den_web_session"
	csrfField  = "csrf"
	tokenField = "token"
	// sessionLifetime is how long a login lasts in a browser.
	sessionLifetime = 7 * 24 * time.Hour
)

// authView is what templates know of the visitor's rights.
type authView struct {
	Enabled    bool   // a token is configured: actions exist
	Authorized bool   // this request may act
	CSRF       string // the value forms carry in the csrf field
}

func (h *handler) authView(r *http.Request) authView {
	a := authView{Enabled: h.token != ""}
	if a.Enabled && (h.bearer(r) || h.cookie(r)) {
		a.Authorized = true
		a.CSRF = h.derive("csrf")
	}
	return a
}

// derive is an HMAC of purpose keyed with the token: what the session
// cookie and the CSRF field hold, so neither reveals the token and a new
// token makes old ones worthless.
func (h *handler) derive(purpose string) string {
	m := hmac.New(sha256.New, []byte(h.token))
	m.Write([]byte("den web " + purpose + " v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// same compares secrets in constant time.
func same(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// bearer reports whether the request carries the token in an
// Authorization: Bearer header.
func (h *handler) bearer(r *http.Request) bool {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && same(strings.TrimSpace(v), h.token)
}

// cookie reports whether the request carries a valid session cookie.
func (h *handler) cookie(r *http.Request) bool {
	c, err := r.Cookie(cookieName)
	return err == nil && same(c.Value, h.derive("session"))
}

// Reasons an action is refused.
var (
	errReadOnly   = errors.New("this status page is read-only: actions need web.token to be configured")
	errNoToken    = errors.New("actions need the token: log in, or send it in an Authorization: Bearer header or a token form field")
	errCrossSite  = errors.New("refused: the request came from another site")
	errCSRF       = errors.New("refused: the form is missing its CSRF field or it is stale; reload the page and try again")
	errBadRequest = errors.New("bad request")
)

// allowed checks, on every action request, that it may act; the error
// says why not (each is a 403).
func (h *handler) allowed(r *http.Request) error {
	if h.token == "" {
		return errReadOnly
	}
	if crossSite(r) {
		return errCrossSite
	}
	if h.bearer(r) {
		return nil
	}
	if same(r.PostForm.Get(tokenField), h.token) {
		return nil
	}
	if !h.cookie(r) {
		return errNoToken
	}
	if !same(r.PostForm.Get(csrfField), h.derive("csrf")) {
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

// action wraps an action's handler with the check, logging refusals.
func (h *handler) action(f func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, errBadRequest)
			return
		}
		if err := h.allowed(r); err != nil {
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

// login checks the token from the form and sets the session cookie.
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
	if !same(r.PostForm.Get(tokenField), h.token) {
		h.log.Info("web: login refused: wrong token", zap.String("remote", r.RemoteAddr))
		h.renderStatus(w, r, http.StatusForbidden, "login", page{Title: "Log in", Nav: "login", Message: "Wrong token.", Data: map[string]any{"Next": next}})
		return
	}
	h.log.Info("web: logged in", zap.String("remote", r.RemoteAddr))
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: h.derive("session"), Path: "/", MaxAge: int(sessionLifetime.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r)})
	http.Redirect(w, r, withMsg(next, "logged-in"), http.StatusSeeOther)
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if crossSite(r) {
		h.fail(w, r, http.StatusForbidden, errCrossSite)
		return
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
