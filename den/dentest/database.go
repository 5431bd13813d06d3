package dentest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/internal/testdeadline"
)

// URI is the server's mongodb:// URI.
func URI() string { return serverURI }

// Client is a client of the server, shared by the package's tests.
func Client() *mongo.Client { return client }

// DB returns a new database for test t, named after it, dropped when the
// test ends.
func DB(t testing.TB) *mongo.Database {
	t.Helper()
	if client == nil {
		t.Fatal("dentest: no server; call dentest.Main from TestMain")
	}
	db := client.Database(dbName(t.Name()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			t.Logf("dentest: drop database %s: %v", db.Name(), err)
		}
	})
	return db
}

// dbName makes a valid, unique database name from a test name: letters,
// digits and _, at most 60 bytes.
func dbName(test string) string {
	var b strings.Builder
	for _, r := range test {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 45 {
		name = name[:45]
	}
	return fmt.Sprintf("t_%s_%08x", name, rand.Uint32())
}

// Context returns a context for test t that ends with it, or at
// Deadline, so that a hung server fails the test instead of hanging the
// suite.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), Deadline())
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 50ms until it returns true. within is how
// long the wait takes on a quiet machine, with room to spare: a wait past
// it is logged (once), not failed, because a busy machine makes a test
// slow, not wrong. The test fails only at Deadline, saying what it waited
// for: that catches a hang without a wall-clock bound tuned to how fast
// the server scans today.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	eventually(t, within, func() string { return what }, cond)
}

// eventually is Eventually with what it waits for said as it then is.
func eventually(t testing.TB, within time.Duration, what func() string, cond func() bool) {
	t.Helper()
	start := time.Now()
	slow := start.Add(within)
	ok := testdeadline.Until(50*time.Millisecond, func() bool {
		if cond() {
			return true
		}
		if now := time.Now(); !slow.IsZero() && now.After(slow) {
			t.Logf("still waiting after %s (expected within %s) for: %s", now.Sub(start).Round(time.Second), within, what())
			slow = time.Time{}
		}
		return false
	})
	if !ok {
		t.Fatalf("gave up at the test binary's deadline, after %s, waiting for: %s", time.Since(start).Round(time.Second), what())
	}
}

// EndToEnd skips test t under `go test -short`: t runs a whole node, its
// runner processes and the development server's scans (seconds to minutes
// each), where a developer's loop wants the unit tests. CI and the README's
// test command run without -short, so every such test runs there.
func EndToEnd(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("end to end (a whole node, or the hostile corpus against every query): skipped under -short; go test without -short runs it")
	}
}

// ExampleDB returns a new database named after name for an Example
// function, which has no testing.TB, and a function that drops it. It
// needs the server Main starts, and panics without one: an Example's
// output would not say why it printed nothing.
func ExampleDB(name string) (*mongo.Database, func()) {
	if client == nil {
		panic("dentest: no server; call dentest.Main from TestMain")
	}
	db := client.Database(dbName(name))
	return db, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "dentest: drop database %s: %v\n", db.Name(), err)
		}
	}
}
