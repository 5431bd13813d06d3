package web

import (
	"bytes"
	"context"
	"net/http"
	"sync"
)

// liveHeader marks the page's own fetch of itself after the change token
// changed (app.js): such a fetch by a viewer who is not logged in is
// served from the one render of that page for that token, shared by
// every such viewer (livePages). A navigation or a reload never is: it
// reads anew, as always.
const liveHeader = "X-Den-Live"

// maxLivePages bounds how many pages (by URL) are kept for one token:
// past it, a page is rendered for each viewer, as without sharing.
const maxLivePages = 64

// livePages keeps, for the current change token, the pages rendered for
// the live fetches of viewers who are not logged in, one per URL: when
// the token changes, every open copy of a page asks for it at once, and
// it is read and rendered once for all of them. Logged-in viewers' pages
// carry their own CSRF field and are never shared.
type livePages struct {
	mu    sync.Mutex
	token string
	pages map[string]*livePage
}

// livePage is one page rendered for a token; ready is closed once it is.
type livePage struct {
	ready  chan struct{}
	status int
	header http.Header
	body   []byte
}

// serve answers r from the page rendered for token, rendering it with
// next if it is not yet (or waiting while another viewer's request does).
// A render that does not answer 200 is not shared.
func (lp *livePages) serve(w http.ResponseWriter, r *http.Request, token string, next http.HandlerFunc) {
	key := r.URL.RequestURI()
	lp.mu.Lock()
	if lp.token != token {
		lp.token, lp.pages = token, map[string]*livePage{}
	}
	p, found := lp.pages[key]
	if !found {
		if len(lp.pages) >= maxLivePages {
			lp.mu.Unlock()
			next(w, r)
			return
		}
		p = &livePage{ready: make(chan struct{})}
		lp.pages[key] = p
	}
	lp.mu.Unlock()
	if !found {
		lp.render(p, key, r, next)
		p.write(w)
		return
	}
	select {
	case <-p.ready:
	case <-r.Context().Done():
		return
	}
	if p.status != http.StatusOK {
		next(w, r)
		return
	}
	p.write(w)
}

// render renders the page p for key once, for every viewer that asks
// for it; the viewers waiting are let go however it ends (a panic too),
// and a render that did not answer 200 is forgotten.
func (lp *livePages) render(p *livePage, key string, r *http.Request, next http.HandlerFunc) {
	p.status = http.StatusInternalServerError
	defer func() {
		close(p.ready)
		if p.status != http.StatusOK {
			lp.mu.Lock()
			if lp.pages[key] == p {
				delete(lp.pages, key)
			}
			lp.mu.Unlock()
		}
	}()
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	next(rec, r)
	p.status, p.header, p.body = rec.status, rec.header, rec.body.Bytes()
}

func (p *livePage) write(w http.ResponseWriter) {
	for k, v := range p.header {
		w.Header()[k] = v
	}
	w.WriteHeader(p.status)
	w.Write(p.body)
}

// recorder keeps a response to write it to several viewers.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if !rec.wrote {
		rec.status, rec.wrote = status, true
	}
}

func (rec *recorder) Write(b []byte) (int, error) {
	rec.wrote = true
	return rec.body.Write(b)
}

// sharable reports whether r is a live fetch of a viewer who is not
// logged in (no session, no Authorization header): the page it gets is
// the same for every such viewer.
func (h *handler) sharable(r *http.Request) bool {
	if r.Header.Get(liveHeader) == "" || r.Header.Get("Authorization") != "" {
		return false
	}
	if h.token == "" {
		return true
	}
	_, loggedIn := h.session(r)
	return !loggedIn
}

// contextWithLive is ctx carrying the token a page's request began with.
func contextWithLive(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, liveKey{}, token)
}
