package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
)

// den run --http-listen serves /metrics, /healthz and /readyz for the
// node it runs, counts the commands of the node's client, writes the
// node's version to its document, and frees the port when it stops; a
// port in use stops the start with exit 1 and says which setting.
func TestRunServesHTTP(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := denDB(t, db, "", "run", "--node", "clinode", "--http-listen", taken.Addr().String())
	r.must(t, ExitError)
	if !strings.Contains(r.stderr, "http.listen "+taken.Addr().String()) || !strings.Contains(r.stderr, "address already in use") {
		t.Errorf("stderr %q does not name http.listen and the taken port", r.stderr)
	}
	addr := taken.Addr().String()
	taken.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	go func() {
		var out, errOut strings.Builder
		exited <- run(ctx, []string{"run", "--mongo-uri", dentest.URI(), "--database", db.Name(), "--node", "clinode", "--http-listen", addr}, strings.NewReader(""), &out, &errOut)
	}()
	get := getter(addr)
	dentest.Eventually(t, 2*time.Minute, "/readyz 200", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d", code)
	}
	// /readyz says ready while the first pass is under way (its loop
	// works); the node document's write comes in that pass.
	dentest.Eventually(t, 2*time.Minute, "/metrics with the node client's findAndModify and den_ready 1", func() bool {
		code, body := get("/metrics")
		return code == http.StatusOK && strings.Contains(body, `den_mongodb_commands_total{command="findAndModify"}`) && strings.Contains(body, "den_ready 1")
	})
	// The findAndModify counted may be the node document's own upsert,
	// counted as it starts: wait for it to land.
	var raw bson.Raw
	dentest.Eventually(t, time.Minute, "the node document of clinode", func() bool {
		raw, err = db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: "clinode"}}).Raw()
		return err == nil
	})
	if v, _ := raw.Lookup("version").StringValueOK(); v != version() {
		t.Errorf("node document version %q, want %q", v, version())
	}
	cancel()
	select {
	case code := <-exited:
		if code != ExitOK {
			t.Errorf("den run exited %d after its context ended, want 0", code)
		}
	case <-time.After(time.Minute):
		t.Fatal("den run did not stop")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port still taken after den run stopped: %v", err)
	}
	ln.Close()
}

// With http.web, the node's endpoint serves the status page at / beside
// its own paths, read-only without web.token.
func TestRunServesWebPage(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	dentest.Queue(t, db, "pagequeue", "Disbatch::Plugin::Demo", 1, "fifo")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	file := filepath.Join(t.TempDir(), "den.yaml")
	if err := os.WriteFile(file, []byte("mongo: {uri: \""+dentest.URI()+"\", database: "+db.Name()+"}\nnode: pagenode\nhttp: {listen: \""+addr+"\", web: true}\nweb: {hosts: [status.example.com]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	go func() {
		var out, errOut strings.Builder
		exited <- run(ctx, []string{"run", "--config", file}, strings.NewReader(""), &out, &errOut)
	}()
	get := getter(addr)
	dentest.Eventually(t, 2*time.Minute, "/readyz 200", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	// /readyz says ready while the first pass is under way; the node's
	// document, which the page lists, is written in that pass.
	dentest.Eventually(t, 2*time.Minute, "/ with the queue and the node", func() bool {
		code, body := get("/")
		return code == http.StatusOK && strings.Contains(body, "pagequeue") && strings.Contains(body, "pagenode")
	})
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "den_ready") {
		t.Errorf("/metrics %d beside the page", code)
	}
	// The page answers only its own names (here 127.0.0.1 and web.hosts),
	// 421 to any other Host; /metrics, /healthz and /readyz answer any.
	for _, tc := range []struct {
		host, path string
		want       int
	}{
		{"attacker.example", "/", http.StatusMisdirectedRequest}, {"attacker.example:80", "/tasks", http.StatusMisdirectedRequest},
		{"status.example.com", "/", http.StatusOK}, {"attacker.example", "/metrics", http.StatusOK}, {"attacker.example", "/readyz", http.StatusOK},
	} {
		req, _ := http.NewRequest("GET", "http://"+addr+tc.path, nil)
		req.Host = tc.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || (tc.want == http.StatusMisdirectedRequest && strings.Contains(string(b), "pagequeue")) {
			t.Errorf("GET %s with Host %s: %d, want %d", tc.path, tc.host, resp.StatusCode, tc.want)
		}
	}
	resp, err := http.Post("http://"+addr+"/nodes/maxthreads", "application/x-www-form-urlencoded", strings.NewReader("node=pagenode&maxthreads=0"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("an action without web.token answered %d, want 403", resp.StatusCode)
	}
	cancel()
	<-exited
}

// getter returns a GET of a path on addr: the status code and the body
// (or the error's text, with code 0).
func getter(addr string) func(path string) (int, string) {
	return func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}
