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

// den web serves the status page on the address given, read-only without
// a token, until its context ends; bad addresses and short tokens are
// usage errors.
func TestWebCommand(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "pages", "Disbatch::Plugin::Demo", 1, "fifo")
	id := dentest.Tasks(t, db, qid, bson.D{})[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"web", "--mongo-uri", dentest.URI(), "--database", db.Name(), "--listen", addr},
			strings.NewReader(""), io.Discard, io.Discard)
	}()
	var body string
	dentest.Eventually(t, time.Minute, "den web answering on "+addr, func() bool {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == 200
	})
	if !strings.Contains(body, "Database "+db.Name()) || !strings.Contains(body, "pages") || !strings.Contains(body, "Read-only") {
		t.Errorf("den web's overview:\n%s", body)
	}
	// Another name for this address (DNS rebinding) gets 421, not the page.
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Host = "attacker.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("den web with Host attacker.example: %v %v, want 421", resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err := http.Post("http://"+addr+"/tasks/"+id.Hex()+"/cancel", "application/x-www-form-urlencoded", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cancel on a read-only den web: %d, want 403", resp.StatusCode)
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

	denDB(t, db, "", "web", "--listen", "8080").must(t, ExitUsage)
	cfg := filepath.Join(t.TempDir(), "den.yaml")
	os.WriteFile(cfg, []byte("web:\n  token: short\n"), 0o600)
	if r := denDB(t, db, "", "web", "--config", cfg); r.code != ExitUsage || !strings.Contains(r.stderr, "web.token") {
		t.Errorf("a short token: exit %d, %s", r.code, r.stderr)
	}
}

// den web started while MongoDB is unreachable keeps running: its pages
// answer 503 with the outage banner, and it stops cleanly.
func TestWebDatabaseDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"web", "--mongo-uri", "mongodb://127.0.0.1:1/", "--database", "x", "--listen", addr},
			strings.NewReader(""), io.Discard, io.Discard)
	}()
	var body string
	var status int
	dentest.Eventually(t, time.Minute, "den web answering on "+addr+" with the outage banner", func() bool {
		select {
		case c := <-code:
			t.Fatalf("den web exited with %d while the database was down", c)
		default:
		}
		resp, err := http.Get("http://" + addr + "/tasks")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body, status = string(b), resp.StatusCode
		return strings.Contains(body, "Database unreachable since")
	})
	if status != http.StatusServiceUnavailable || strings.Contains(body, "server selection") {
		t.Errorf("den web with the database down: %d\n%s", status, body)
	}
	select {
	case c := <-code:
		t.Fatalf("den web exited with %d while the database was down", c)
	default:
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
}
