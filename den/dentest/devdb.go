package dentest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// devdbProcess is a `den devdb` the harness started: the package's shared
// server, or a test's own (OwnServer).
type devdbProcess struct {
	uri      string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	stopping atomic.Bool
	exited   chan struct{} // closed once it has ended and been reaped
}

// startDevdb starts `den devdb` on data, on a port of its choosing, and
// returns once it has printed its URI, or with why it did not (by
// giveUp). name is what its unexpected end is told as.
//
// It dies with the test binary (parent-death signal), which the kernel
// sends when the thread that started it ends, not the process: so it is
// started from a thread kept, locked to the goroutine that waits for it,
// until it has ended. Started from any other thread, it was killed,
// silently, the first time a goroutine that locked its thread and
// returned (as den/devdb's do for PostgreSQL's programs) ran on that
// thread.
func startDevdb(bin, data, name string, giveUp <-chan time.Time) (*devdbProcess, error) {
	cmd := exec.Command(bin, "devdb", "--data", data, "--listen", "127.0.0.1:0", "--exit-on-stdin-eof")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &devdbProcess{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends after the server
		defer close(p.exited)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		if !p.stopping.Load() {
			fmt.Fprintf(os.Stderr, "dentest: %s (den devdb, pid %d) ended while the tests ran, at %s: %v\n",
				name, cmd.Process.Pid, time.Now().Format("15:04:05.000"), exitReason(cmd.ProcessState, err))
		}
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start den devdb: %w", err)
	}
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l, ok := <-line:
		if !ok || !strings.HasPrefix(l, "mongodb://") {
			p.stop()
			return nil, fmt.Errorf("den devdb printed %q, not a URI", l)
		}
		p.uri = l
		return p, nil
	case <-giveUp:
		p.stop()
		return nil, fmt.Errorf("den devdb had not started by the test binary's deadline")
	}
}

// stop closes the server's standard input, which stops it, and waits for
// its end; after 10 s it kills it.
func (p *devdbProcess) stop() {
	p.stopping.Store(true)
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// exitReason says how a process ended: its exit status, or the signal
// that killed it.
func exitReason(st *os.ProcessState, err error) string {
	if st == nil {
		return err.Error()
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return st.String()
}
