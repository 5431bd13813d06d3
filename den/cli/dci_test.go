package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/den-project/den/den/dentest"
)

// freeAddr is a loopback address nothing listens on (for now).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// den web --dci-listen serves Disbatch's web API beside the page: reads
// open, writes 401 with WWW-Authenticate: Basic realm="disbatch" without
// the token and done with it as the basic-auth password, 421 for another
// Host, and one count of wrong tokens with the page (10 wrong on the
// page's login, then a wrong one on the API is 429). A bad --dci-listen
// is a usage error.
func TestWebServesDCI(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	page, api := freeAddr(t), freeAddr(t)
	const token = "9c2f4e7a1b3d5f6081a2c4e6b8d0f1a3"
	cfg := filepath.Join(t.TempDir(), "den.yaml")
	os.WriteFile(cfg, []byte("web:\n  token: "+token+"\n  dci_plugins: [Disbatch::Plugin::Demo]\n"), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"web", "--config", cfg, "--mongo-uri", dentest.URI(), "--database", db.Name(), "--listen", page, "--dci-listen", api},
			strings.NewReader(""), io.Discard, io.Discard)
	}()
	dentest.Eventually(t, time.Minute, "the API answering on "+api, func() bool {
		resp, err := http.Get("http://" + api + "/plugins")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && string(b) == `["Disbatch::Plugin::Demo"]`
	})
	post := func(user, pass string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+api+"/queues", strings.NewReader("name=q1&plugin=Disbatch%3A%3APlugin%3A%3ADemo"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if user != "" || pass != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post("", ""); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Basic realm="disbatch"` {
		t.Errorf("a write without credentials: %d, WWW-Authenticate %q; want 401 and Basic realm=\"disbatch\"", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if resp := post("admin", token); resp.StatusCode != http.StatusOK {
		t.Errorf("a write with the token as the password: %d, want 200", resp.StatusCode)
	}
	if n := dentest.Count(t, db.Collection("queues"), map[string]any{"name": "q1", "plugin": "Disbatch::Plugin::Demo"}); n != 1 {
		t.Errorf("%d queues q1 after the write, want 1", n)
	}
	req, _ := http.NewRequest("GET", "http://"+api+"/queues", nil)
	req.Host = "attacker.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("the API with Host attacker.example: %v %v, want 421", resp, err)
	} else {
		resp.Body.Close()
	}
	// Ten wrong tokens on the page's login limit the address on the API too.
	for i := 0; i < 10; i++ {
		resp, err := http.PostForm("http://"+page+"/login", url.Values{"token": {"wrong"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if resp := post("admin", "wrong"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a wrong token on the API after 10 on the page: %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp := post("admin", token); resp.StatusCode != http.StatusBadRequest { // q1 exists: the token is accepted, the name refused
		t.Errorf("the right token from the limited address: %d, want it accepted (400 for the taken name)", resp.StatusCode)
	}
	cancel()
	select {
	case c := <-code:
		if c != ExitOK {
			t.Errorf("den web stopped with exit %d, want 0", c)
		}
	case <-time.After(time.Minute):
		t.Fatal("den web did not stop when its context ended")
	}
	if r := denDB(t, db, "", "web", "--dci-listen", "8081"); r.code != ExitUsage || !strings.Contains(r.stderr, "--dci-listen") {
		t.Errorf("--dci-listen 8081: exit %d, %s", r.code, r.stderr)
	}
}
