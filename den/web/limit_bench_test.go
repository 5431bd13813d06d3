package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/web"
)

// BenchmarkGuessing measures how fast den web answers wrong tokens on
// /login from one address when no answer waits (as for a guesser that
// never waits for one: every token is compared, and only the right one
// is answered at once). It is the most guesses an attacker gets
// answered, and docs/security.md sizes web.token's least strength from
// it. Reported as guesses/s; run with -cpu to vary the server's cores.
func BenchmarkGuessing(b *testing.B) {
	db := dentest.DB(b)
	h, err := web.New(web.Options{DB: db, Token: "Benchmark-token-4hF7vQ2xZ9pL3mK8", Sleep: func(context.Context, time.Duration) {}})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	body := url.Values{"token": {"a-wrong-guess-0000000000"}}.Encode()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Post(srv.URL+"/login", "application/x-www-form-urlencoded", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests {
				b.Errorf("a wrong token: %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "guesses/s")
}
