package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/runner"
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
	// pending holds the requests told (no answer) but not yet sent: they
	// go with the next question, or at flush, in one write, so that the
	// supervisor wakes once for them all.
	pendingMu sync.Mutex
	pending   []byte
}

// question is a request and the verb its answer must have.
type question struct{ verb, arg, answer string }

func linkFromEnv() (*link, error) {
	v := os.Getenv(runner.EnvSupervisor)
	pidText, startText, ok := strings.Cut(v, ":")
	pid, err1 := strconv.Atoi(pidText)
	started, err2 := strconv.ParseInt(startText, 10, 64)
	if !ok || err1 != nil || err2 != nil || pid != os.Getppid() {
		return nil, fmt.Errorf("%s=%q does not name this process's parent", runner.EnvSupervisor, v)
	}
	syscall.CloseOnExec(runner.ControlFD) // never handed on to the task's programs
	// Non-blocking, so that a wait for the supervisor's answer parks in
	// the runtime's poller instead of holding a thread in read(2) (see
	// supervise).
	if err := syscall.SetNonblock(runner.ControlFD, true); err != nil {
		return nil, fmt.Errorf("control channel on fd %d: %w", runner.ControlFD, err)
	}
	f := os.NewFile(runner.ControlFD, "supervisor")
	if f == nil {
		return nil, errors.New("no control channel on fd 3")
	}
	return &link{f: f, r: bufio.NewReader(f), pid: pid, started: started, asking: make(chan struct{}, 1)}, nil
}

func (l *link) close() { l.f.Close() }

// begin tells the supervisor that a run of task (hex) begins, and returns
// the run's token, and the run's pids cgroup at the node's process limit
// ("" for none).
func (l *link) begin(ctx context.Context, task string) (bson.ObjectID, string, error) {
	line, err := l.ask(ctx, runner.VerbBegin, task, runner.VerbRun)
	if err != nil {
		return bson.ObjectID{}, "", fmt.Errorf("begin the run with the supervisor: %w", err)
	}
	tokenText, dir, _ := strings.Cut(line, " ")
	token, err := bson.ObjectIDFromHex(tokenText)
	if err != nil || dir == "" {
		return bson.ObjectID{}, "", fmt.Errorf("supervisor answered %q for a run token and pids cgroup", line)
	}
	if dir == runner.NoPids {
		dir = ""
	}
	return token, dir, nil
}

// idle tells the supervisor that the run is over and recorded, and
// returns how many of its processes are still there (see supervisor.idle).
func (l *link) idle(ctx context.Context) (int, error) {
	line, err := l.ask(ctx, runner.VerbIdle, "", runner.VerbIdle)
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
// case where the worker dies with processes left (sent with the next
// question, or by flush).
func (l *link) setGrace(grace time.Duration) {
	l.tell(runner.VerbGrace, grace.Milliseconds())
}

func stoppedCount(line string) (int, error) {
	n, err := strconv.Atoi(line)
	if err != nil {
		return 0, fmt.Errorf("supervisor answered %q", line)
	}
	return n, nil
}

// stopThenUsage asks, in one exchange, the supervisor to stop every
// process of the run other than the worker, and then for the run's usage
// (which the last of its processes to exit are in): how many it stopped,
// and the usage, or the error of either.
func (l *link) stopThenUsage(ctx context.Context, grace time.Duration) (int, runner.Measured, error, error) {
	var m runner.Measured
	answers, err := l.askAll(ctx, question{runner.VerbStop, strconv.FormatInt(grace.Milliseconds(), 10), runner.VerbStopped}, question{runner.VerbUsage, "", runner.VerbUsage})
	if err != nil {
		return 0, m, fmt.Errorf("ask the supervisor to stop leftover processes: %w", err), fmt.Errorf("ask the supervisor for the run's usage: %w", err)
	}
	n, errStop := stoppedCount(answers[0])
	errUsage := json.Unmarshal([]byte(answers[1]), &m)
	if errUsage != nil {
		errUsage = fmt.Errorf("supervisor's usage %q: %w", answers[1], errUsage)
	}
	return n, m, errStop, errUsage
}

// ask sends one request, verb with arg ("" for none), and returns the
// argument of its answer, which must be answerVerb's (den/runner/control.go).
func (l *link) ask(ctx context.Context, verb, arg, answerVerb string) (string, error) {
	answers, err := l.askAll(ctx, question{verb, arg, answerVerb})
	if err != nil {
		return "", err
	}
	return answers[0], nil
}

// askAll sends the requests told before and qs in one write, and returns
// the argument of each answer, in order; the supervisor answers them in
// order. Questions are asked one batch at a time; a batch whose asker
// gave up (ctx) still takes its answers off the channel before the next
// is asked.
func (l *link) askAll(ctx context.Context, qs ...question) ([]string, error) {
	select {
	case l.asking <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	l.pendingMu.Lock()
	out := l.pending
	l.pending = nil
	l.pendingMu.Unlock()
	for _, q := range qs {
		out = append(append(out, runner.Request(q.verb, q.arg)...), '\n')
	}
	if _, err := l.f.Write(out); err != nil {
		<-l.asking
		return nil, err
	}
	type answer struct {
		lines []string
		err   error
	}
	got := make(chan answer, 1)
	go func() {
		var a answer
		for range qs {
			line, err := l.r.ReadString('\n')
			if err != nil {
				a.err = err
				break
			}
			a.lines = append(a.lines, line)
		}
		<-l.asking
		got <- a
	}()
	select {
	case a := <-got:
		if a.err != nil {
			return nil, fmt.Errorf("read the supervisor's answer: %w", a.err)
		}
		answers := make([]string, len(qs))
		for i, q := range qs {
			rest, ok := strings.CutPrefix(strings.TrimSpace(a.lines[i]), q.answer+" ")
			if !ok {
				return nil, fmt.Errorf("supervisor answered %q to %q", a.lines[i], runner.Request(q.verb, q.arg))
			}
			answers[i] = rest
		}
		return answers, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// tell queues a request that has no answer: it is sent with the next
// question, or by flush.
func (l *link) tell(verb string, arg int64) {
	l.pendingMu.Lock()
	defer l.pendingMu.Unlock()
	l.pending = append(append(l.pending, runner.Request(verb, strconv.FormatInt(arg, 10))...), '\n')
}

// flush sends the requests told and not yet sent.
func (l *link) flush() error {
	l.pendingMu.Lock()
	defer l.pendingMu.Unlock()
	if len(l.pending) == 0 {
		return nil
	}
	_, err := l.f.Write(l.pending)
	l.pending = nil
	return err
}

// limitProcesses tells the supervisor the run's process limit n, and
// returns the pids cgroup the run's programs must join, "" for none.
func (l *link) limitProcesses(ctx context.Context, n int) (string, error) {
	line, err := l.ask(ctx, runner.VerbProcs, strconv.Itoa(n), runner.VerbProcs)
	if err != nil {
		return "", fmt.Errorf("ask the supervisor for the run's pids cgroup: %w", err)
	}
	if line == runner.NoPids {
		return "", nil
	}
	return line, nil
}

// usage asks the supervisor for the run's usage so far.
func (l *link) usage(ctx context.Context) (runner.Measured, error) {
	var m runner.Measured
	line, err := l.ask(ctx, runner.VerbUsage, "", runner.VerbUsage)
	if err != nil {
		return m, fmt.Errorf("ask the supervisor for the run's usage: %w", err)
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return m, fmt.Errorf("supervisor's usage %q: %w", line, err)
	}
	return m, nil
}

// setMemoryLimit tells the supervisor the task's memory request, in bytes
// (sent with the next question, or by flush).
func (l *link) setMemoryLimit(bytes int64) {
	l.tell(runner.VerbMemory, bytes)
}
