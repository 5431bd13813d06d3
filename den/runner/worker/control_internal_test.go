package worker

import (
	"bufio"
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/runner"
)

// controlPair is a worker's link and the supervisor's end of a control
// channel, both non-blocking as supervise and linkFromEnv make them.
func controlPair(t *testing.T) (*link, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if err := unix.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
	}
	w, s := os.NewFile(uintptr(fds[0]), "worker"), os.NewFile(uintptr(fds[1]), "supervisor")
	t.Cleanup(func() { w.Close(); s.Close() })
	return &link{f: w, r: bufio.NewReader(w), asking: make(chan struct{}, 1)}, s
}

// A run's requests reach the supervisor in the batches the worker makes
// (begin alone; grace and memory, told, with the process limit's question
// when a task has its own; the stop with the usage), each batch read at
// once, and each answered in one write: the supervisor and the worker wake
// once per batch, not once per request.
func TestControlRequestsTravelInBatches(t *testing.T) {
	t.Parallel()
	l, sup := controlPair(t)
	requests := make(chan []string, 4)
	go runner.ReadRequests(sup, requests)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// begin is answered with the run's token and its pids cgroup.
	type begun struct {
		token bson.ObjectID
		dir   string
		err   error
	}
	began := make(chan begun, 1)
	go func() {
		token, dir, err := l.begin(ctx, "6b097ee7265d7a004a00ed4c")
		began <- begun{token, dir, err}
	}()
	if b := <-requests; !slices.Equal(b, []string{"begin 6b097ee7265d7a004a00ed4c"}) {
		t.Fatalf("begin sent %q", b)
	}
	token := bson.NewObjectID()
	if _, err := sup.Write([]byte("run " + token.Hex() + " /sys/fs/cgroup/pids/den-run-x\n")); err != nil {
		t.Fatal(err)
	}
	if b := <-began; b.err != nil || b.token != token || b.dir != "/sys/fs/cgroup/pids/den-run-x" {
		t.Fatalf("begin: %v %q %v; want the token and the pids cgroup answered", b.token, b.dir, b.err)
	}

	l.setGrace(1500 * time.Millisecond)
	l.setMemoryLimit(64 << 20)
	// Told, not sent: nothing is on the channel yet.
	select {
	case b := <-requests:
		t.Fatalf("the supervisor read %q before the worker asked anything", b)
	case <-time.After(100 * time.Millisecond):
	}
	type result struct {
		answer string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		dir, err := l.limitProcesses(ctx, 7)
		got <- result{dir, err}
	}()
	if b := <-requests; !slices.Equal(b, []string{"grace 1500", "memory 67108864", "procs 7"}) {
		t.Fatalf("first batch %q, want the grace, the memory request and the process limit together", b)
	}
	if _, err := sup.Write([]byte("procs -\n")); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.err != nil || r.answer != "" {
		t.Fatalf("limitProcesses: %q, %v; want no pids cgroup", r.answer, r.err)
	}

	type stopResult struct {
		n                 int
		m                 runner.Measured
		errStop, errUsage error
	}
	stopped := make(chan stopResult, 1)
	go func() {
		var r stopResult
		r.n, r.m, r.errStop, r.errUsage = l.stopThenUsage(ctx, 2*time.Second)
		stopped <- r
	}()
	if b := <-requests; !slices.Equal(b, []string{"stop 2000", "usage"}) {
		t.Fatalf("second batch %q, want the stop and the usage together", b)
	}
	if _, err := sup.Write([]byte("stopped 2\nusage {\"cpu_user_s\":0.25,\"samples\":3}\n")); err != nil {
		t.Fatal(err)
	}
	r := <-stopped
	if r.errStop != nil || r.errUsage != nil || r.n != 2 || r.m.CPUUser != 0.25 || r.m.Samples != 3 {
		t.Fatalf("stopThenUsage: %d, %+v, %v, %v; want 2 stopped and the usage sent", r.n, r.m, r.errStop, r.errUsage)
	}
	// A tell with no question after it goes at flush.
	l.setGrace(time.Second)
	if err := l.flush(); err != nil {
		t.Fatal(err)
	}
	if b := <-requests; !slices.Equal(b, []string{"grace 1000"}) {
		t.Fatalf("flushed %q, want the grace alone", b)
	}
}
