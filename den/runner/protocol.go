package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The node–runner protocol. A node and a runner it started say everything
// they have to say to each other after the start over one channel, the
// task channel: a unix SOCK_SEQPACKET socketpair the node creates for every
// runner it starts, whatever its settings. The node keeps one end; the
// runner inherits the other (EnvTasksFD), which its supervisor hands to its
// worker and keeps no copy of. Each packet is one message, one JSON object
// whose only key names the message (see packet); the socket keeps packets
// whole and in order, so no framing is needed.
//
// The node says:
//   - RunTask: run this task next (to a runner it may reuse, Spec.Reuse,
//     once that runner has said Done).
//   - CancelRun: stop the run of this task, if it is the one running.
//   - LiveOutput: publish this task's output live, if it is the one running.
//
// The runner (its worker) says:
//   - Ready: it serves the channel (sent first).
//   - Report: how a task's run ended, once its outcome is stored, for the
//     node's metrics (no database command).
//   - Done: a task's run is over and recorded, every process of it is
//     stopped, and the runner waits for the next task (a runner the node
//     may reuse only).
//
// Why this channel and not the relay's control socket: the task channel
// exists for every runner, with the relay (runner.relay) on or off, and it
// is the one the node already uses to hand over tasks and reach the task
// running; the relay's socket is there only when the relay is, and carries
// connections (descriptors), not messages. So the relay's socket stays
// the relay's, and whatever a runner tells its node, reports included,
// reaches it with the relay on or off.
//
// What does not travel on the channel: the first task's Spec, in the
// runner's environment (SpecEnv), because the supervisor needs it before
// the worker, which reads the channel, exists; and the signals a node
// sends a runner it cannot talk to (a runner of an earlier life of the
// node, whose channel closed with it, or one that serves one task), or
// SIGKILL. Only the node that started a runner holds its channel.

// EnvTasksFD names the descriptor of a runner's task channel; unset or
// empty, the runner serves the one task of its spec and tells its node
// nothing.
const EnvTasksFD = "DEN_TASKS_FD"

// EnvRelayFD names the file descriptor of the runner's relay control
// channel: set by a node whose runners reach MongoDB through it (the
// default; runner.relay: false turns it off), and by the supervisor for
// its worker.
const EnvRelayFD = "DEN_RELAY_FD"

// Message is one message of the node–runner protocol: RunTask, CancelRun,
// LiveOutput (from the node), Ready, Report or Done (from the runner).
type Message interface{ put(*packet) }

// RunTask asks a runner to run the task of Spec next.
type RunTask struct{ Spec Spec }

// CancelRun asks a runner to stop the run of Task (hex), if it is running.
type CancelRun struct{ Task string }

// LiveOutput asks a runner to publish Task's (hex) output live, if it is
// running.
type LiveOutput struct{ Task string }

// Ready says that the runner serves its task channel.
type Ready struct{}

// Done says that the run of Task (hex) is over and recorded, and that the
// runner waits for its next task.
type Done struct{ Task string }

// Report says how the run of Task (hex) ended, once its outcome is stored:
// the status recorded (0 when the task had changed under the run and
// nothing was recorded), whether it was put back for a retry, and the
// bytes the task wrote to stdout and stderr (up to max_output each).
type Report struct {
	Task   string `json:"task,omitempty"`
	Status int    `json:"status"`
	Retry  bool   `json:"retry,omitempty"`
	Stdout int64  `json:"stdout"`
	Stderr int64  `json:"stderr"`
	// Outcome is who decided how the run ended (queue.Outcome's kind);
	// Run is how long it ran and Wait how long the task waited before it
	// started, from when it could first start (queue.ReadyAt), in seconds.
	Outcome string  `json:"outcome,omitempty"`
	Run     float64 `json:"run_seconds,omitempty"`
	Wait    float64 `json:"wait_seconds,omitempty"`
}

// packet is a message as it travels: exactly one field is set.
type packet struct {
	Task   *Spec   `json:"task,omitempty"`
	Cancel string  `json:"cancel,omitempty"`
	Live   string  `json:"live,omitempty"`
	Ready  bool    `json:"ready,omitempty"`
	Done   string  `json:"done,omitempty"`
	Report *Report `json:"report,omitempty"`
}

func (m RunTask) put(p *packet)    { p.Task = &m.Spec }
func (m CancelRun) put(p *packet)  { p.Cancel = m.Task }
func (m LiveOutput) put(p *packet) { p.Live = m.Task }
func (Ready) put(p *packet)        { p.Ready = true }
func (m Done) put(p *packet)       { p.Done = m.Task }
func (m Report) put(p *packet)     { p.Report = &m }

// message is the one message p holds, or nil.
func (p *packet) message() Message {
	switch {
	case p.Task != nil:
		return RunTask{Spec: *p.Task}
	case p.Cancel != "":
		return CancelRun{Task: p.Cancel}
	case p.Live != "":
		return LiveOutput{Task: p.Live}
	case p.Ready:
		return Ready{}
	case p.Done != "":
		return Done{Task: p.Done}
	case p.Report != nil:
		return *p.Report
	}
	return nil
}

// MaxMessage bounds one packet (a spec's queue document is at most 32
// KiB, plugin configuration is small).
const MaxMessage = 1 << 20

// TaskChannel returns a new task channel: the node's end and the end a
// runner inherits. Both are close-on-exec; exec.Cmd's ExtraFiles hands
// the runner's end to one child without the flag. The node's end is
// non-blocking, so that closing it ends a read in progress.
func TaskChannel() (node, runner *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("create a task channel: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("create a task channel: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "tasks"), os.NewFile(uintptr(fds[1]), "tasks-runner"), nil
}

// sendWithin bounds how long Send waits for room in the channel: a
// runner that reads nothing (stopped, frozen) must not hold up its node.
const sendWithin = time.Second

// Send writes one message to a task channel, failing when the other end
// has not made room for it within a second.
func Send(f *os.File, m Message) error {
	var p packet
	m.put(&p)
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode a task channel message: %w", err)
	}
	f.SetWriteDeadline(time.Now().Add(sendWithin)) // an error: not pollable, and then writes do not block
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("send on the task channel: %w", err)
	}
	return nil
}

// ErrUnknown is returned (wrapped) by Receive for a packet that holds no
// message it knows: the reader skips it.
var ErrUnknown = errors.New("not a message of the node–runner protocol")

// Receive reads one message from a task channel; io.EOF (wrapped) once
// the other end is closed, ErrUnknown (wrapped) for a packet that is not a
// message.
func Receive(f *os.File, buf []byte) (Message, error) {
	n, err := f.Read(buf)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("task channel closed: %w", errEOF)
	}
	var p packet
	if err := json.Unmarshal(buf[:n], &p); err != nil {
		return nil, fmt.Errorf("decode a task channel message: %w (%w)", ErrUnknown, err)
	}
	m := p.message()
	if m == nil {
		return nil, fmt.Errorf("decode a task channel message: %w", ErrUnknown)
	}
	return m, nil
}

var errEOF = errors.New("EOF")

// Listener is what a node does with what a runner says on its task
// channel; a nil function ignores its message.
type Listener struct {
	Ready  func()
	Done   func(task string)
	Report func(Report)
}

// Listen reads what the runner at the other end of the node's end f says,
// calling l's functions in turn, until the channel closes (the runner
// exited, or f was closed). It skips what it cannot read.
func Listen(f *os.File, l Listener) {
	buf := make([]byte, 64<<10)
	for {
		m, err := Receive(f, buf)
		if errors.Is(err, ErrUnknown) {
			continue
		}
		if err != nil {
			return
		}
		switch m := m.(type) {
		case Ready:
			if l.Ready != nil {
				l.Ready()
			}
		case Done:
			if l.Done != nil {
				l.Done(m.Task)
			}
		case Report:
			if l.Report != nil {
				l.Report(m)
			}
		}
	}
}
