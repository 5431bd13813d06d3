package httpserve_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/den-project/den/den/internal/testdeadline"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/den-project/den/den/httpserve"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The endpoint serves its own paths and a mounted handler under its
// prefix, /readyz says why not on one line (and what a ready node notes),
// and Serve returns once its context ends.
func TestServeMountsAndStops(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "den_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	var ready atomic.Bool
	var note atomic.Pointer[string]
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "page at "+r.URL.Path) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- httpserve.Serve(ctx, ln, httpserve.Config{
			Gatherer: reg,
			Ready: func() error {
				if ready.Load() {
					return nil
				}
				return errors.New("MongoDB unreachable: first line\nsecond line")
			},
			ReadyNote: func() string {
				if n := note.Load(); n != nil {
					return *n
				}
				return ""
			},
			Mounts: []httpserve.Mount{{Prefix: "/status/", Handler: page}},
		})
	}()
	base := "http://" + ln.Addr().String()
	for _, tc := range []struct {
		path, want string
		code       int
	}{
		{"/healthz", "ok\n", 200},
		{"/readyz", "MongoDB unreachable: first line\n", 503},
		{"/status/queues", "page at /status/queues", 200},
		{"/nothing", "404 page not found\n", 404},
	} {
		if code, body := get(t, base+tc.path); code != tc.code || body != tc.want {
			t.Errorf("GET %s: %d %q, want %d %q", tc.path, code, body, tc.code, tc.want)
		}
	}
	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "den_test_total 3") {
		t.Errorf("GET /metrics: %d\n%s", code, body)
	}
	ready.Store(true)
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("GET /readyz when ready: %d %q", code, body)
	}
	slow := "working, passes are slow: 4s\nmore"
	note.Store(&slow)
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ready: working, passes are slow: 4s\n" {
		t.Errorf("GET /readyz when ready with a note: %d %q", code, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-testdeadline.GiveUp():
		t.Fatal("Serve did not return after its context ended")
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("the listener still accepts connections after Serve returned")
	}
}

// A mount on one of the endpoint's own paths, or without a handler, is an
// error, not a silently shadowed page.
func TestBadMounts(t *testing.T) {
	t.Parallel()
	h := http.NotFoundHandler()
	for _, m := range []httpserve.Mount{{"/metrics", h}, {"/readyz/", h}, {"status", h}, {"/status/", nil}} {
		if _, err := httpserve.Handler(httpserve.Config{Gatherer: prometheus.NewRegistry(), Mounts: []httpserve.Mount{m}}); err == nil {
			t.Errorf("mount %q accepted", m.Prefix)
		}
	}
}
