package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// link is the worker's end of the control channel.
type link struct {
	f       *os.File
	r       *bufio.Reader
	pid     int
	started int64
	// asking holds a token while a question waits for its answer (even
	// after its asker gave up), so that every answer goes to its question.
	asking chan struct{}
}

func linkFromEnv() (*link, error) {
	v := os.Getenv(envSupervisor)
	pidText, startText, ok := strings.Cut(v, ":")
	pid, err1 := strconv.Atoi(pidText)
	started, err2 := strconv.ParseInt(startText, 10, 64)
	if !ok || err1 != nil || err2 != nil || pid != os.Getppid() {
		return nil, fmt.Errorf("%s=%q does not name this process's parent", envSupervisor, v)
	}
	syscall.CloseOnExec(controlFD) // never handed on to the task's programs
	// Non-blocking, so that a wait for the supervisor's answer parks in
	// the runtime's poller instead of holding a thread in read(2) (see
	// supervise).
	if err := syscall.SetNonblock(controlFD, true); err != nil {
		return nil, fmt.Errorf("control channel on fd %d: %w", controlFD, err)
	}
	f := os.NewFile(controlFD, "supervisor")
	if f == nil {
		return nil, errors.New("no control channel on fd 3")
	}
	return &link{f: f, r: bufio.NewReader(f), pid: pid, started: started, asking: make(chan struct{}, 1)}, nil
}

func (l *link) close() { l.f.Close() }

// begin tells the supervisor that a run of task (hex) begins, and returns
// the run's token.
func (l *link) begin(ctx context.Context, task string) (bson.ObjectID, error) {
	line, err := l.ask(ctx, verbBegin, task, verbRun)
	if err != nil {
		return bson.ObjectID{}, fmt.Errorf("begin the run with the supervisor: %w", err)
	}
	token, err := bson.ObjectIDFromHex(line)
	if err != nil {
		return bson.ObjectID{}, fmt.Errorf("supervisor answered %q for a run token", line)
	}
	return token, nil
}

// idle tells the supervisor that the run is over and recorded, and
// returns how many of its processes are still there (see supervisor.idle).
func (l *link) idle(ctx context.Context) (int, error) {
	line, err := l.ask(ctx, verbIdle, "", verbIdle)
	if err != nil {
		return 0, fmt.Errorf("end the run with the supervisor: %w", err)
	}
	n, err := strconv.Atoi(line)
	if err != nil {
		return 0, fmt.Errorf("supervisor answered %q", line)
	}
	return n, nil
}

// setGrace tells the supervisor the task's max_termination_time, for the
// case where the worker dies with processes left.
func (l *link) setGrace(grace time.Duration) error {
	return l.tell(verbGrace, grace.Milliseconds())
}

// stopLeftovers asks the supervisor to stop every process of the run other
// than the worker, and returns how many it stopped.
func (l *link) stopLeftovers(ctx context.Context, grace time.Duration) (int, error) {
	line, err := l.ask(ctx, verbStop, strconv.FormatInt(grace.Milliseconds(), 10), verbStopped)
	if err != nil {
		return 0, fmt.Errorf("ask the supervisor to stop leftover processes: %w", err)
	}
	n, err := strconv.Atoi(line)
	if err != nil {
		return 0, fmt.Errorf("supervisor answered %q", line)
	}
	return n, nil
}

// ask sends one request, verb with arg ("" for none), and returns the
// argument of its answer, which must be answerVerb's (control.go).
// Questions are asked one at a time; one whose asker gave up (ctx) still
// takes its answer off the channel before the next is asked.
func (l *link) ask(ctx context.Context, verb, arg, answerVerb string) (string, error) {
	req, prefix := request(verb, arg), answerVerb+" "
	select {
	case l.asking <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if _, err := fmt.Fprintf(l.f, "%s\n", req); err != nil {
		<-l.asking
		return "", err
	}
	type answer struct {
		line string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		line, err := l.r.ReadString('\n')
		<-l.asking
		got <- answer{line, err}
	}()
	select {
	case a := <-got:
		if a.err != nil {
			return "", fmt.Errorf("read the supervisor's answer: %w", a.err)
		}
		rest, ok := strings.CutPrefix(strings.TrimSpace(a.line), prefix)
		if !ok {
			return "", fmt.Errorf("supervisor answered %q to %q", a.line, req)
		}
		return rest, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// tell sends a request that has no answer.
func (l *link) tell(verb string, arg int64) error {
	_, err := fmt.Fprintf(l.f, "%s\n", request(verb, strconv.FormatInt(arg, 10)))
	return err
}

// limitProcesses tells the supervisor the run's process limit n, and
// returns the pids cgroup the run's programs must join, "" for none.
func (l *link) limitProcesses(ctx context.Context, n int) (string, error) {
	line, err := l.ask(ctx, verbProcs, strconv.Itoa(n), verbProcs)
	if err != nil {
		return "", fmt.Errorf("ask the supervisor for the run's pids cgroup: %w", err)
	}
	if line == noPids {
		return "", nil
	}
	return line, nil
}

// usage asks the supervisor for the run's usage so far.
func (l *link) usage(ctx context.Context) (measured, error) {
	var m measured
	line, err := l.ask(ctx, verbUsage, "", verbUsage)
	if err != nil {
		return m, fmt.Errorf("ask the supervisor for the run's usage: %w", err)
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return m, fmt.Errorf("supervisor's usage %q: %w", line, err)
	}
	return m, nil
}

// setMemoryLimit tells the supervisor the task's memory request, in bytes.
func (l *link) setMemoryLimit(bytes int64) error {
	return l.tell(verbMemory, bytes)
}
