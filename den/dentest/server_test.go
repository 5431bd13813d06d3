package dentest_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/den-project/den/den/dentest"
)

// The embedded server outlives every thread of the test binary but the
// one kept for it. Its parent-death signal fires when the thread that
// started it ends, and a goroutine that locks its thread and returns
// without unlocking ends that thread: an in-process devdb does so for
// PostgreSQL's programs (den/devdb), and the old harness, which started
// the server from whichever thread it was on, lost the server, silently,
// whenever such a goroutine happened to run on that thread (every
// in-flight test of the package then failed with "connection refused").
func TestServerOutlivesEndingThreads(t *testing.T) {
	if !dentest.EmbeddedServer() {
		t.Skip("DEN_TEST_MONGODB_URI names the server: the harness started none")
	}
	// Every thread the runtime has now, and the ones it makes meanwhile,
	// ends: goroutines that lock their thread and return, many at once
	// (each holds its thread until all hold one, so that the idle ones
	// are all taken), again and again.
	for range 20 {
		n := 4 * runtime.GOMAXPROCS(0)
		var locked, done sync.WaitGroup
		locked.Add(n)
		done.Add(n)
		all := make(chan struct{})
		for range n {
			go func() {
				defer done.Done()
				runtime.LockOSThread()
				locked.Done()
				<-all
			}()
		}
		locked.Wait()
		close(all)
		done.Wait()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := dentest.Client().Ping(ctx, nil); err != nil {
		t.Fatalf("the embedded server is gone after the test binary's threads ended: %v", err)
	}
}
