package dentest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// OwnServer returns the URI of an embedded server of the calling test's
// own, stopped when the test ends: for a test whose database (hundreds of
// megabytes, documents of 16 MiB) would slow every other test of the
// package, since the embedded server runs one write at a time and scans
// whole collections. Against DEN_TEST_MONGODB_URI it returns that URI:
// MongoDB runs commands side by side.
func OwnServer(t testing.TB) string {
	t.Helper()
	if os.Getenv(EnvURI) != "" {
		return URI()
	}
	bin, err := BuildDen(t.TempDir())
	if err != nil {
		t.Fatalf("dentest: own server: %v", err)
	}
	cmd := exec.Command(bin, "devdb", "--data", filepath.Join(t.TempDir(), "db"), "--listen", "127.0.0.1:0", "--exit-on-stdin-eof")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("dentest: own server: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		stdin.Close() // it stops at the end of its standard input
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
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
			t.Fatalf("dentest: own server: den devdb printed %q, not a URI", l)
		}
		return l
	case <-GiveUp():
		t.Fatal("dentest: own server: den devdb had not started by the test binary's deadline")
	}
	return ""
}
