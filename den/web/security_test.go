package web_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/web"
)

// clock is a test's clock: it moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// serveWith starts the page with o on a loopback port; o.Listen, when
// empty, is the server's own address.
func serveWith(t *testing.T, o web.Options) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	if o.Listen == "" {
		o.Listen = srv.Listener.Addr().String()
	}
	o.Addr = srv.Listener.Addr()
	h, err := web.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// rawRequest writes a request by hand to addr, with the Host line given
// ("" writes none), and returns the status and body.
func rawRequest(t *testing.T, addr, requestLine, host string) (int, http.Header, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := requestLine + "\r\n"
	if host != "" {
		req += "Host: " + host + "\r\n"
	}
	req += "Connection: close\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q with Host %q: %v", requestLine, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// The page answers only its own host names: a page on attacker.example
// whose name is pointed at this server (DNS rebinding) gets 421 and
// nothing of the page, whatever the path; the listen address, localhost
// (on any port, as through an SSH tunnel) and web.hosts get the page.
func TestOnlyItsOwnHostNames(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	core, logs := observer.New(zapcore.InfoLevel)
	srv := serveWith(t, web.Options{DB: f.db, Log: zap.New(core), Token: testToken,
		Hosts: []string{"status.example.com", "proxy.example.net:8443", "[2001:db8::7]"}})
	addr := srv.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	paths := []string{"/", "/tasks", "/tasks/" + f.done.Hex(), "/tasks/" + f.done.Hex() + "/output.txt?stream=stdout", "/login", "/static/style.css"}
	for _, host := range []string{"attacker.example", "attacker.example:" + port, "ATTACKER.example.:" + port,
		"127.0.0.1.attacker.example:" + port, "localhost.attacker.example", "status.example.com.evil", "evil.status.example.com",
		"proxy.example.net", "proxy.example.net:9999", "10.1.2.3:" + port, "[2001:db8::8]", "-bad-[", "status.example.com:" + port + ":1"} {
		for _, path := range paths {
			code, hdr, body := rawRequest(t, addr, "GET "+path+" HTTP/1.1", host)
			if code != http.StatusMisdirectedRequest {
				t.Errorf("GET %s with Host %q: %d, want 421", path, host, code)
			}
			if strings.ContainsAny(body, "<{") || strings.Contains(body, "resize") || strings.Contains(body, "hello") || len(body) > 200 {
				t.Errorf("GET %s with Host %q: the 421's body is more than a short note: %.300s", path, host, body)
			}
			if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("GET %s with Host %q: Content-Type %q, want text/plain", path, host, ct)
			}
		}
		// Nor does a misdirected login or action reach the token check.
		code, _, _ := rawRequest(t, addr, "POST /login HTTP/1.1", host)
		if code != http.StatusMisdirectedRequest {
			t.Errorf("POST /login with Host %q: %d, want 421", host, code)
		}
	}
	// HTTP/1.0 without a Host line names no host at all.
	if code, _, _ := rawRequest(t, addr, "GET / HTTP/1.0", ""); code != http.StatusMisdirectedRequest {
		t.Errorf("HTTP/1.0 without Host: %d, want 421", code)
	}
	// Each refused name is logged once (14 names so far, 7 requests each),
	// and at most 32 names in all.
	refused := func() int { return logs.FilterMessageSnippet("does not answer to").Len() }
	if n := refused(); n != 14 {
		t.Errorf("%d lines for 14 refused names, want one each", n)
	}
	for i := 0; i < 100; i++ {
		rawRequest(t, addr, "GET / HTTP/1.1", "rebind-"+strconv.Itoa(i)+".attacker.example")
	}
	if n := refused(); n != 32 {
		t.Errorf("%d lines after 114 refused names, want 32", n)
	}
	for _, host := range []string{"127.0.0.1:" + port, "127.0.0.1", "localhost:" + port, "LocalHost.:" + port, "localhost:9000",
		"[::1]:" + port, "[0:0:0:0:0:0:0:1]:" + port, "status.example.com", "Status.Example.COM.:443", "proxy.example.net:8443", "[2001:db8::7]:" + port} {
		code, _, body := rawRequest(t, addr, "GET / HTTP/1.1", host)
		if code != http.StatusOK || !strings.Contains(body, "resize") {
			t.Errorf("GET / with Host %q: %d, want 200 and the page", host, code)
		}
	}
	// Listening on every interface, the machine's hostname is the page's
	// too (served here on loopback, configured as 0.0.0.0).
	name, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	all := serveWith(t, web.Options{DB: f.db, Log: zap.NewNop(), Listen: "0.0.0.0:" + port})
	allAddr := all.Listener.Addr().String()
	if code, _, _ := rawRequest(t, allAddr, "GET / HTTP/1.1", strings.ToUpper(name)+":"+port); code != http.StatusOK {
		t.Errorf("listening on 0.0.0.0, Host %q: %d, want 200", name, code)
	}
	if code, _, _ := rawRequest(t, allAddr, "GET / HTTP/1.1", "attacker.example:"+port); code != http.StatusMisdirectedRequest {
		t.Errorf("listening on 0.0.0.0, Host attacker.example: %d, want 421", code)
	}
	// A bad web.hosts entry fails the start.
	for _, bad := range []string{"https://status.example.com", "status.example.com/path", "a b", "[::1"} {
		if _, err := web.New(web.Options{DB: f.db, Hosts: []string{bad}}); err == nil || !strings.Contains(err.Error(), "web.hosts") {
			t.Errorf("web.hosts %q: %v, want an error naming web.hosts", bad, err)
		}
	}
}

// cookieOf logs in with c and returns the session cookie set.
func cookieOf(t *testing.T, c *http.Client, base string, header http.Header) *http.Cookie {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/login", strings.NewReader(url.Values{"token": {testToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d, want 303", resp.StatusCode)
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == "den_web_session" {
			return ck
		}
	}
	t.Fatal("login set no session cookie")
	return nil
}

// withCookie is a client that sends only the given session cookie.
func withCookie(value string) *http.Client {
	jar, _ := cookiejar.New(nil)
	c := client(jar)
	c.Transport = cookieTransport{value}
	return c
}

type cookieTransport struct{ value string }

func (ct cookieTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Cookie", "den_web_session="+ct.value)
	return http.DefaultTransport.RoundTrip(r)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// session reports whether a cookie value opens a session: the task page
// offers cancel, and gives the session's CSRF value.
func session(t *testing.T, base, value string, task bson.ObjectID) (string, bool) {
	t.Helper()
	_, page := get(t, withCookie(value), base+"/tasks/"+task.Hex())
	m := csrfRE.FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, `id="cancel"`) {
		return "", false
	}
	return m[1], true
}

// A login is a random session of its own, kept on the server: two logins
// get different cookies and CSRF values; logging out ends the session for
// whoever kept its cookie; a session ends when idle and when old, whatever
// its use; a restarted page (with the same token or a new one) knows none
// of the old sessions.
func TestSessionsEnd(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	clk := newClock()
	srv := serveWith(t, web.Options{DB: f.db, Log: zap.NewNop(), Token: testToken, Now: clk.now})
	a := cookieOf(t, client(nil), srv.URL, nil)
	b := cookieOf(t, client(nil), srv.URL, http.Header{"X-Forwarded-Proto": {"https"}})
	if a.Value == b.Value {
		t.Fatalf("two logins got the same cookie %q", a.Value)
	}
	if len(a.Value) < 43 || a.Value == testToken || strings.Contains(a.Value, testToken) {
		t.Errorf("session cookie %q: want 32 random bytes, nothing of the token", a.Value)
	}
	if !a.HttpOnly || a.SameSite != http.SameSiteStrictMode || a.Path != "/" || a.Secure || !b.Secure {
		t.Errorf("cookie flags: HttpOnly %v SameSite %v Path %q Secure %v (over https %v); want HttpOnly, Strict, /, Secure only over https",
			a.HttpOnly, a.SameSite, a.Path, a.Secure, b.Secure)
	}
	csrfA, okA := session(t, srv.URL, a.Value, f.running)
	csrfB, okB := session(t, srv.URL, b.Value, f.running)
	if !okA || !okB {
		t.Fatalf("fresh sessions do not open the page's actions: %v %v", okA, okB)
	}
	if csrfA == csrfB {
		t.Errorf("two sessions share the CSRF value %q", csrfA)
	}
	// A's CSRF value is no good with B's cookie.
	id := dentest.Tasks(t, f.db, f.queue, bson.D{{Key: "case", Value: "crossed csrf"}})[0]
	if code := post(t, withCookie(b.Value), srv.URL+"/tasks/"+id.Hex()+"/cancel", url.Values{"csrf": {csrfA}}, nil); code != 403 || cancelFlag(t, f.db, id) {
		t.Errorf("B's cookie with A's CSRF value: %d, want 403 and nothing cancelled", code)
	}

	// Logging out ends A on the server: its cookie, kept by someone who
	// copied it, opens nothing.
	if code := post(t, withCookie(a.Value), srv.URL+"/logout", nil, nil); code != 303 {
		t.Fatalf("logout: %d", code)
	}
	if _, ok := session(t, srv.URL, a.Value, f.running); ok {
		t.Error("after logout, the old cookie still opens the page's actions")
	}
	id = dentest.Tasks(t, f.db, f.queue, bson.D{{Key: "case", Value: "after logout"}})[0]
	if code := post(t, withCookie(a.Value), srv.URL+"/tasks/"+id.Hex()+"/cancel", url.Values{"csrf": {csrfA}}, nil); code != 403 || cancelFlag(t, f.db, id) {
		t.Errorf("cancel with the cookie and CSRF value of a logged-out session: %d, want 403 and nothing cancelled", code)
	}
	if _, ok := session(t, srv.URL, b.Value, f.running); !ok {
		t.Error("one session's logout ended another")
	}

	// Idle: B unused for longer than web.SessionIdle.
	clk.add(web.SessionIdle + time.Second)
	if _, ok := session(t, srv.URL, b.Value, f.running); ok {
		t.Errorf("a session unused for %v still works", web.SessionIdle+time.Second)
	}
	// Old: C used every so often, but web.SessionLifetime after its login.
	c := cookieOf(t, client(nil), srv.URL, nil)
	for used := time.Duration(0); used < web.SessionLifetime-web.SessionIdle/2; used += web.SessionIdle / 2 {
		if _, ok := session(t, srv.URL, c.Value, f.running); !ok {
			t.Fatalf("a session in use ended %v after login, before its lifetime", used)
		}
		clk.add(web.SessionIdle / 2)
	}
	clk.add(web.SessionIdle / 2)
	if _, ok := session(t, srv.URL, c.Value, f.running); ok {
		t.Errorf("a session in use still works %v after login (lifetime %v)", web.SessionLifetime, web.SessionLifetime)
	}

	// A restart: sessions live in the process, so a new page, with the
	// same token or a new one, opens none of the old.
	d := cookieOf(t, client(nil), srv.URL, nil)
	if _, ok := session(t, srv.URL, d.Value, f.running); !ok {
		t.Fatal("a fresh session does not work")
	}
	same := serveWith(t, web.Options{DB: f.db, Log: zap.NewNop(), Token: testToken, Now: clk.now})
	other := serveWith(t, web.Options{DB: f.db, Log: zap.NewNop(), Token: "another-token-0123456789", Now: clk.now})
	for name, s := range map[string]*httptest.Server{"same token": same, "new token": other} {
		if _, ok := session(t, s.URL, d.Value, f.running); ok {
			t.Errorf("a restarted page (%s) accepts a session of the one before", name)
		}
	}

	// At most web.MaxSessions are kept: logging in once more ends the
	// oldest.
	first := cookieOf(t, client(nil), same.URL, nil)
	var last *http.Cookie
	for i := 0; i < web.MaxSessions; i++ {
		clk.add(time.Millisecond)
		last = cookieOf(t, client(nil), same.URL, nil)
	}
	if _, ok := session(t, same.URL, first.Value, f.running); ok {
		t.Errorf("the oldest of %d sessions still works", web.MaxSessions+1)
	}
	if _, ok := session(t, same.URL, last.Value, f.running); !ok {
		t.Error("the newest session does not work")
	}
}

// fromAddress is a client whose connections come from the loopback
// address ip (127.0.0.0/8 is all this machine's).
func fromAddress(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c := client(nil)
	c.Transport = &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}
	return c
}

// postResp posts a form and returns the response, body read.
func postResp(t *testing.T, c *http.Client, u string, form url.Values, header http.Header) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// sleeps stands in for the wait that slows a wrong token's answer: it
// counts the waits asked for, and while gated it holds them until the
// gate opens (or the request ends), so that a test sees the slowing and
// how many answers wait at once without spending the time.
type sleeps struct {
	mu      sync.Mutex
	n       int           // waits asked for
	d       time.Duration // the last one's length
	gate    chan struct{} // while not nil, waits block until it is closed
	entered chan struct{} // told of each wait that blocks
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) {
	s.mu.Lock()
	s.n++
	s.d = d
	gate, entered := s.gate, s.entered
	s.mu.Unlock()
	if gate == nil {
		return
	}
	entered <- struct{}{}
	select {
	case <-gate:
	case <-ctx.Done():
	}
}

func (s *sleeps) count() (int, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.d
}

// Guessing the token from the operator's own address (everyone behind an
// SSH tunnel is 127.0.0.1) never locks the operator out, and the guesser
// is still slowed. Of 500 wrong tokens from one address (each claiming
// another in X-Forwarded-For, not believed), the first web.LoginFailures
// get 403 and the rest 429 with Retry-After, each answered only after
// web.LoginSlowdown; the log has a few lines, not 500. While the address
// is limited, its right token logs in at once and a Bearer action with it
// works, also while the guesser holds every slowed answer the address
// may have waiting; those beyond are answered at once. A session from
// before keeps working, another address logs in, wrong Bearer tokens
// count too, and after web.LoginLimit the address is counted afresh.
func TestLoginAttemptsLimited(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	clk := newClock()
	core, logs := observer.New(zapcore.InfoLevel)
	slow := &sleeps{}
	srv := serveWith(t, web.Options{DB: f.db, Log: zap.New(core), Token: testToken, Now: clk.now, Sleep: slow.sleep})
	attacker := fromAddress("127.0.0.1")
	// The operator logged in from this address before the guessing began.
	operator := cookieOf(t, attacker, srv.URL, nil)
	operatorCSRF, ok := session(t, srv.URL, operator.Value, f.running)
	if !ok {
		t.Fatal("the operator's session does not work")
	}
	codes := guessWrongTokens(t, attacker, srv.URL, clk)
	if codes[http.StatusForbidden] != web.LoginFailures || codes[http.StatusTooManyRequests] != 500-web.LoginFailures {
		t.Errorf("500 wrong tokens answered %v, want %d 403 and the rest 429", codes, web.LoginFailures)
	}
	if n, d := slow.count(); n != 500-web.LoginFailures || d != web.LoginSlowdown {
		t.Errorf("%d answers slowed (the last by %v), want the %d answers after the limit began, each by %v", n, d, 500-web.LoginFailures, web.LoginSlowdown)
	}
	// Limited, the address's right token is still accepted, at once: the
	// operator behind the same SSH tunnel logs in, and a script's Bearer
	// action works.
	if resp := postResp(t, attacker, srv.URL+"/login", url.Values{"token": {testToken}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the right token from a limited address: %d, want 303 (logged in)", resp.StatusCode)
	}
	id := dentest.Tasks(t, f.db, f.queue, bson.D{{Key: "case", Value: "limited bearer"}})[0]
	resp := postResp(t, attacker, srv.URL+"/tasks/"+id.Hex()+"/cancel", nil, http.Header{"Authorization": {"Bearer " + testToken}})
	if resp.StatusCode != http.StatusOK || !cancelFlag(t, f.db, id) {
		t.Errorf("a Bearer action with the right token from a limited address: %d, want 200 and the task cancelled", resp.StatusCode)
	}
	if n, _ := slow.count(); n != 500-web.LoginFailures {
		t.Errorf("the right token's answers were slowed (%d waits, want %d)", n, 500-web.LoginFailures)
	}
	// The guesser holds every slowed answer the address may have waiting
	// (web.LoginSlowdown not over): further wrong tokens are answered at
	// once, and the right one still gets in.
	holdEverySlowedAnswer(t, attacker, srv.URL, slow)
	// The session from before works, from the same address.
	id = dentest.Tasks(t, f.db, f.queue, bson.D{{Key: "case", Value: "session"}})[0]
	if code := post(t, withCookie(operator.Value), srv.URL+"/tasks/"+id.Hex()+"/cancel", url.Values{"csrf": {operatorCSRF}}, nil); code != 303 || !cancelFlag(t, f.db, id) {
		t.Errorf("a session opened before the limit: cancel %d, want 303", code)
	}
	// Another address logs in.
	if resp := postResp(t, fromAddress("127.0.0.2"), srv.URL+"/login", url.Values{"token": {testToken}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the right token from another address: %d, want 303", resp.StatusCode)
	}
	// Wrong Bearer tokens on actions count as guesses too.
	third := fromAddress("127.0.0.3")
	bearerCodes := map[int]int{}
	for i := 0; i < web.LoginFailures+5; i++ {
		resp := postResp(t, third, srv.URL+"/tasks/"+f.waiting.Hex()+"/cancel", nil, http.Header{"Authorization": {"Bearer guess-" + strconv.Itoa(i)}})
		bearerCodes[resp.StatusCode]++
	}
	if bearerCodes[http.StatusForbidden] != web.LoginFailures || bearerCodes[http.StatusTooManyRequests] != 5 || cancelFlag(t, f.db, f.waiting) {
		t.Errorf("wrong Bearer tokens answered %v, want %d 403 then 429", bearerCodes, web.LoginFailures)
	}
	// A few lines, not one per guess: one warning per limited address.
	warnings := logs.FilterMessageSnippet("too many wrong tokens").Len()
	if warnings != 2 {
		t.Errorf("%d warnings that an address is limited, want 2 (one per address)", warnings)
	}
	if n := logs.Len(); n > 2*web.LoginFailures+10 {
		t.Errorf("%d log lines for %d guesses, want a bounded few:\n%v", n, 500+parallelGuessers+web.LoginFailures+5, logs.All()[:30])
	}
	// After the limit, the address's wrong tokens count afresh (403, not
	// slowed), and its end is logged once.
	clk.add(web.LoginLimit)
	before, _ := slow.count()
	if resp := postResp(t, attacker, srv.URL+"/login", url.Values{"token": {"guess-after"}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a wrong token after the limit: %d, want 403", resp.StatusCode)
	}
	if resp := postResp(t, attacker, srv.URL+"/login", url.Values{"token": {testToken}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the right token after the limit: %d, want 303", resp.StatusCode)
	}
	if n, _ := slow.count(); n != before {
		t.Errorf("%d answers slowed after the limit ended, want none", n-before)
	}
	if n := logs.FilterMessageSnippet("no longer limited").Len(); n != 1 {
		t.Errorf("%d lines that the limit ended, want 1", n)
	}
}

// guessWrongTokens sends 500 wrong tokens to srvURL's login from
// attacker, a second passing on clk every 100, and counts the answers by
// status code; each 429 must say when to come back.
func guessWrongTokens(t *testing.T, attacker *http.Client, srvURL string, clk *clock) map[int]int {
	t.Helper()
	codes := map[int]int{}
	for i := 0; i < 500; i++ {
		// Each guess claims another client in X-Forwarded-For: not believed.
		resp := postResp(t, attacker, srvURL+"/login", url.Values{"token": {"guess-" + strconv.Itoa(i) + "-0123456789"}},
			http.Header{"X-Forwarded-For": {"10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)}, "X-Real-Ip": {"10.9.9." + strconv.Itoa(i%256)}})
		codes[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests {
			s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || s <= 0 || s > int(web.LoginLimit/time.Second) {
				t.Fatalf("429 with Retry-After %q, want whole seconds up to %v", resp.Header.Get("Retry-After"), web.LoginLimit)
			}
		}
		if i%100 == 0 {
			clk.add(time.Second)
		}
	}
	return codes
}

// parallelGuessers is how many wrong tokens holdEverySlowedAnswer sends
// at once.
const parallelGuessers = 12

// holdEverySlowedAnswer has attacker, a limited address, send
// parallelGuessers wrong tokens at once while slow holds the slowed
// answers: 4 wait, the rest are answered at once with 429, and the right
// token still gets in; then it lets the waiting ones go (429 too).
func holdEverySlowedAnswer(t *testing.T, attacker *http.Client, srvURL string, slow *sleeps) {
	t.Helper()
	slow.mu.Lock()
	slow.gate, slow.entered = make(chan struct{}), make(chan struct{}, 100)
	slow.mu.Unlock()
	var opened sync.Once
	open := func() { opened.Do(func() { close(slow.gate) }) }
	t.Cleanup(open) // before the server closes, should the test stop here
	answers := make(chan int, parallelGuessers)
	for i := 0; i < parallelGuessers; i++ {
		go func() {
			req, _ := http.NewRequest("POST", srvURL+"/login", strings.NewReader(url.Values{"token": {"parallel-guess-" + strconv.Itoa(i)}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := attacker.Do(req)
			if err != nil {
				answers <- 0
				return
			}
			resp.Body.Close()
			answers <- resp.StatusCode
		}()
	}
	waiting := 0
	for waiting < 4 {
		select {
		case <-slow.entered:
			waiting++
		case <-time.After(time.Minute):
			t.Fatalf("%d answers waiting, want 4", waiting)
		}
	}
	for i := 0; i < parallelGuessers-waiting; i++ {
		select {
		case code := <-answers:
			if code != http.StatusTooManyRequests {
				t.Errorf("a wrong token beyond the slowed answers the address may have waiting: %d, want 429", code)
			}
		case <-time.After(time.Minute):
			t.Fatalf("a wrong token beyond the 4 waiting was not answered at once")
		}
	}
	select {
	case <-slow.entered:
		t.Error("more than 4 slowed answers wait at once for one address")
	default:
	}
	if resp := postResp(t, attacker, srvURL+"/login", url.Values{"token": {testToken}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the right token while the guesser holds every slowed answer: %d, want 303", resp.StatusCode)
	}
	open()
	for i := 0; i < waiting; i++ {
		if code := <-answers; code != http.StatusTooManyRequests {
			t.Errorf("a slowed wrong token: %d, want 429", code)
		}
	}
	slow.mu.Lock()
	slow.gate = nil
	slow.mu.Unlock()
}
