package web_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/web"
)

// slowPage serves the page of f's database through a fault proxy that
// holds every find of tasks for delay: a database that is up but slow.
// It returns the server, the proxy, the page's logs and a channel that
// gets a value each time the handler has ended a request.
func slowPage(t *testing.T, f fixture, delay time.Duration, o web.Options) (*httptest.Server, *dentest.FaultProxy, *observer.ObservedLogs, chan struct{}) {
	t.Helper()
	p := dentest.Faults(t, 1, dentest.Rule{Command: "find", Collection: "tasks", Fault: dentest.Delay, Rate: 1, Delay: delay})
	core, logs := observer.New(zapcore.DebugLevel)
	o.DB, o.Log = p.Client(t).Database(f.db.Name()), zap.New(core)
	h, err := web.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		ended <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	return srv, p, logs, ended
}

// Three requests dropped by their client (an overview abandoned at 1 s
// put den web in outage mode: the next request, from anyone, got 503
// Database unreachable), then the next one: it is a 200, and nothing
// said the database was unreachable. Red before: the dropped reads'
// canceled contexts were taken for an unreachable database, and the next
// request, given 2 s for an outage, met the slow read and got 503.
func TestDroppedClientsAreNoOutage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv, _, logs, ended := slowPage(t, f, 3*time.Second, web.Options{})
	output := srv.URL + "/tasks/" + f.done.Hex() + "/output?stream=stdout"
	impatient := &http.Client{Transport: testTransport, Timeout: 300 * time.Millisecond}
	for range 3 {
		if res, err := impatient.Get(output); err == nil {
			res.Body.Close()
			t.Fatalf("answered %d within 0.3 s, though its read takes 3 s", res.StatusCode)
		}
		<-ended // den web has finished with the dropped request
	}
	code, body := get(t, client(nil), output)
	if code != 200 || !strings.Contains(body, "hello") {
		t.Errorf("the request after three dropped ones: %d %s, want 200 with the output", code, body)
	}
	code, body = get(t, client(nil), srv.URL+"/tasks/"+f.done.Hex())
	if code != 200 || strings.Contains(body, "Database unreachable") {
		t.Errorf("the task page after three dropped requests: %d, want 200 without the outage banner:\n%.500s", code, body)
	}
	if n := logs.FilterMessageSnippet("unreachable").Len(); n != 0 {
		t.Errorf("dropped requests logged the database unreachable (%d lines)", n)
	}
	if n := logs.FilterMessageSnippet("went away").FilterLevelExact(zapcore.DebugLevel).Len(); n != 3 {
		t.Errorf("%d debug lines for the 3 dropped requests, want 3", n)
	}
}

// A database that is up but slow: the read that runs out of its time gets
// 503 with Retry-After, saying so, for itself alone: no outage banner,
// nothing logged as unreachable, and the next read, the database fast
// again, is a 200. Red before: 503 "Database unreachable since ...".
func TestSlowDatabaseIs503ForThatRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv, p, logs, _ := slowPage(t, f, 3*time.Second, web.Options{ReadTimeout: time.Second})
	task := srv.URL + "/tasks/" + f.done.Hex()
	for _, u := range []string{task, task + "/output?stream=stdout"} {
		res, err := testTransport.RoundTrip(mustRequest(t, u))
		if err != nil {
			t.Fatal(err)
		}
		body := readBody(t, res)
		if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" || !strings.Contains(body, "did not answer within this request&#39;s time limit (1s)") &&
			!strings.Contains(body, "did not answer within this request's time limit (1s)") || strings.Contains(body, "unreachable") {
			t.Errorf("%s with the database slow: %d, Retry-After %q, want 503 saying it ran out of time:\n%.600s", u, res.StatusCode, res.Header.Get("Retry-After"), body)
		}
	}
	p.Set() // the database is fast again
	code, body := get(t, client(nil), task)
	if code != 200 || strings.Contains(body, "Database unreachable") {
		t.Errorf("the next request, the database fast again: %d\n%.500s", code, body)
	}
	if n := logs.FilterMessageSnippet("unreachable").Len(); n != 0 {
		t.Errorf("a slow read logged the database unreachable (%d lines)", n)
	}
}

// At most ReadsPerClient reads of one address run at once: with the
// database slow, a fifth read at once waits its GateWait and gets 429
// with Retry-After, saying why; the four get their pages. Red before:
// five 200s.
func TestPageReadsBoundedPerClient(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv, _, _, _ := slowPage(t, f, 2*web.GateWait, web.Options{})
	output := srv.URL + "/tasks/" + f.done.Hex() + "/output?stream=stdout"
	type answer struct {
		code  int
		retry string
		body  string
	}
	answers := make(chan answer, web.ReadsPerClient+1)
	for range web.ReadsPerClient + 1 {
		go func() {
			res, err := testTransport.RoundTrip(mustRequest(t, output))
			if err != nil {
				answers <- answer{body: err.Error()}
				return
			}
			answers <- answer{res.StatusCode, res.Header.Get("Retry-After"), readBody(t, res)}
		}()
	}
	counts := map[int]int{}
	for range web.ReadsPerClient + 1 {
		a := <-answers
		counts[a.code]++
		if a.code == 429 && (a.retry == "" || !strings.Contains(a.body, "too many reads at once from your address")) {
			t.Errorf("the read refused: Retry-After %q, %s", a.retry, a.body)
		}
	}
	if counts[200] != web.ReadsPerClient || counts[429] != 1 {
		t.Errorf("%d reads at once from one address: %v, want %d 200s and one 429", web.ReadsPerClient+1, counts, web.ReadsPerClient)
	}
}

func mustRequest(t *testing.T, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func readBody(t *testing.T, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := res.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
