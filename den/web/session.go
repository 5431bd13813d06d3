package web

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sync"
	"time"
)

// Sessions: logging in on /login creates one, with a random id (the
// cookie) and a random CSRF value of its own, kept in this process's
// memory only. A session ends at whichever comes first: SessionLifetime
// after login, SessionIdle after its last request, POST /logout, or the
// end of the process (changing web.token means restarting den web or
// den run, so it ends every session). When MaxSessions are open, a new
// login ends the oldest.
const (
	SessionLifetime = 12 * time.Hour
	SessionIdle     = 2 * time.Hour
	MaxSessions     = 1000
)

// session is one login.
type session struct {
	created, seen time.Time
	csrf          string
}

// sessions is the server-side store, keyed by the SHA-256 of the cookie's
// value (so a lookup's timing tells nothing about stored ids).
type sessions struct {
	mu   sync.Mutex
	byID map[[sha256.Size]byte]*session
}

func newSessions() *sessions {
	return &sessions{byID: map[[sha256.Size]byte]*session{}}
}

// randomString returns n random bytes from crypto/rand, encoded with enc.
func randomString(n int, enc func([]byte) string) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("web: random bytes for a session: %w", err)
	}
	return enc(b), nil
}

// create opens a session at now and returns its id (the cookie's value)
// and whether an older session was ended to make room.
func (s *sessions) create(now time.Time) (id string, evicted bool, err error) {
	if id, err = randomString(32, base64.RawURLEncoding.EncodeToString); err != nil {
		return "", false, err
	}
	csrf, err := randomString(32, hex.EncodeToString)
	if err != nil {
		return "", false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byID) >= MaxSessions {
		for k, v := range s.byID {
			if !v.valid(now) {
				delete(s.byID, k)
			}
		}
	}
	if len(s.byID) >= MaxSessions {
		var oldest [sha256.Size]byte
		var at time.Time
		for k, v := range s.byID {
			if at.IsZero() || v.created.Before(at) {
				oldest, at = k, v.created
			}
		}
		delete(s.byID, oldest)
		evicted = true
	}
	s.byID[sha256.Sum256([]byte(id))] = &session{created: now, seen: now, csrf: csrf}
	return id, evicted, nil
}

// valid reports whether the session is still open at now.
func (v *session) valid(now time.Time) bool {
	return now.Sub(v.created) < SessionLifetime && now.Sub(v.seen) < SessionIdle
}

// use returns the CSRF value of the open session id, marking it used at
// now; ok is false for an unknown, ended or expired session (an expired
// one is removed).
func (s *sessions) use(id string, now time.Time) (csrf string, ok bool) {
	if id == "" {
		return "", false
	}
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.byID[key]
	if v == nil {
		return "", false
	}
	if !v.valid(now) {
		delete(s.byID, key)
		return "", false
	}
	if now.After(v.seen) {
		v.seen = now
	}
	return v.csrf, true
}

// revoke ends session id; it reports whether it was open.
func (s *sessions) revoke(id string) bool {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.byID[key]
	delete(s.byID, key)
	return ok
}
