package dentest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/den-project/den/den/internal/contain"
)

// EnvSweep marks every process a test binary starts, directly or through
// a node: task runners are started in sessions of their own and outlive
// their node by design, so a runner whose test ended (its node killed,
// its database dropped) would otherwise go on retrying its final writes
// after the test binary, and the embedded server, are gone. At the end of
// the run, Main stops every process still carrying the binary's mark.
const EnvSweep = "DEN_TEST_SWEEP"

// sweep stops the processes marked with token: SIGTERM (a runner then
// stops its task's processes and records the stop), then, after grace,
// SIGKILL. It returns how many it found.
func sweep(token string, grace time.Duration) int {
	found := marked(token)
	for _, pid := range found {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	for deadline := time.Now().Add(grace); time.Now().Before(deadline) && len(marked(token)) > 0; {
		time.Sleep(50 * time.Millisecond)
	}
	for _, pid := range marked(token) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(found)
}

// marked lists the live processes (not this one, not zombies) whose
// environment has EnvSweep=token.
func marked(token string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte(EnvSweep + "=" + token + "\x00")
	me := os.Getpid()
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == me {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, want...)) {
			continue
		}
		if st, ok := contain.ReadStat(int32(pid)); !ok || st.Exited() {
			continue
		}
		out = append(out, pid)
	}
	return out
}

func sweepToken() string {
	return fmt.Sprintf("%d.%d", os.Getpid(), time.Now().UnixNano())
}
