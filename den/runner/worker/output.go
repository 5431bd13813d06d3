package worker

import (
	"context"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/queue"
)

// InlineLimit is the most output (stdout and stderr together) kept in the
// task document; more goes to GridFS. MongoDB documents are limited to 16
// MiB, and Disbatch uses the same 15 MiB.
const InlineLimit = 15 << 20

// outputs holds a task's stdout and stderr while its plugin runs. It keeps
// them in memory while they may still go into the task document, and
// switches both to streaming GridFS files as soon as they cannot (gfs true,
// or more than the inline limit), so memory stays bounded whatever the
// plugin prints. Writes from several goroutines are safe.
type outputs struct {
	ctx     context.Context
	bucket  *gridfs.Bucket
	taskID  bson.ObjectID
	limit   int
	mu      sync.Mutex
	stdout  *sink
	stderr  *sink
	spilled bool
	// finished is set by finish: later writes (from a plugin abandoned after
	// its grace time) fail instead of storing output nobody will record.
	finished bool
	// max is the most each stream keeps (max_output). The first write past
	// it is cut there, a line saying so ends the stream, onCut is called
	// once, and later writes are discarded: memory stays flat.
	max   int64
	onCut func()
	cut   string // the first stream that was cut, "" while none
}

type sink struct {
	o       *outputs
	name    string
	mem     blocks
	file    *gridfs.Writer
	written int64 // what the plugin wrote, counted up to max
	midLine bool  // the plugin's last byte was not a newline
	cut     bool  // passed max; what follows is discarded
	// stored counts the bytes stored so far (the stream's length as it will
	// be recorded); tail holds the last of them, up to queue.LiveTail, for
	// live output.
	stored int64
	tail   []byte
}

func newOutputs(ctx context.Context, bucket *gridfs.Bucket, taskID bson.ObjectID, mode string) *outputs {
	o := &outputs{ctx: ctx, bucket: bucket, taskID: taskID, limit: InlineLimit, max: runner.DefaultMaxOutput}
	o.stdout = &sink{o: o, name: "stdout"}
	o.stderr = &sink{o: o, name: "stderr"}
	if mode == queue.GFSAlways {
		o.spillLocked()
	}
	return o
}

func (o *outputs) metadata() bson.D { return bson.D{{Key: "task_id", Value: o.taskID}} }

// spillLocked moves both outputs to GridFS files; o.mu must be held. Both
// files exist once it returns, even when storing failed: a failed
// gridfs.Writer keeps failing, so later writes report the same error.
func (o *outputs) spillLocked() error {
	if o.spilled {
		return nil
	}
	o.spilled = true
	for _, s := range []*sink{o.stdout, o.stderr} {
		s.file = o.bucket.Create(o.ctx, s.name, o.metadata())
	}
	var first error
	for _, s := range []*sink{o.stdout, o.stderr} {
		if err := s.mem.drainTo(s.file); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// setMax sets the cap of each stream and what to call when one passes it.
func (o *outputs) setMax(max int64, onCut func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.max, o.onCut = max, onCut
}

// cutStream returns the name of the first stream that passed max_output,
// or "".
func (o *outputs) cutStream() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cut
}

// Write stores what the plugin writes, up to max_output. Past it, the
// write is cut, a line saying so ends the stream, and what follows is
// discarded (reported as written, so a program is stopped by den, not by
// a broken pipe).
func (s *sink) Write(p []byte) (int, error) {
	o := s.o
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.finished {
		return 0, fmt.Errorf("%s: the task's result is already recorded", s.name)
	}
	if s.cut {
		return len(p), nil
	}
	keep := p
	if int64(len(p)) > o.max-s.written {
		keep = p[:o.max-s.written]
	}
	if _, err := s.writeLocked(keep); err != nil {
		return 0, err
	}
	s.written += int64(len(keep))
	if len(keep) > 0 {
		s.midLine = keep[len(keep)-1] != '\n'
	}
	if len(keep) == len(p) {
		return len(p), nil
	}
	s.cut = true
	line := fmt.Sprintf("den: %s was cut at %d bytes (max_output); the rest was discarded\n", s.name, o.max)
	if s.midLine {
		line = "\n" + line
	}
	if _, err := s.writeLocked([]byte(line)); err != nil {
		return 0, err
	}
	if o.cut == "" {
		o.cut = s.name
		if o.onCut != nil {
			o.onCut()
		}
	}
	return len(p), nil
}

// written returns how many bytes the plugin wrote to stdout and stderr, up
// to max_output each.
func (o *outputs) written() (stdout, stderr int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stdout.written, o.stderr.written
}

// writeLocked stores p, in memory or in GridFS; o.mu must be held.
func (s *sink) writeLocked(p []byte) (int, error) {
	o := s.o
	if !o.spilled && o.stdout.mem.Len()+o.stderr.mem.Len()+len(p) > o.limit {
		if err := o.spillLocked(); err != nil {
			return 0, fmt.Errorf("store %s: %w", s.name, err)
		}
	}
	var n int
	var err error
	if o.spilled {
		n, err = s.file.Write(p)
	} else {
		n, err = s.mem.Write(p)
	}
	s.keep(p[:n])
	return n, err
}

// keep adds stored bytes to the tail kept for live output.
func (s *sink) keep(p []byte) {
	s.stored += int64(len(p))
	if len(p) >= queue.LiveTail {
		s.tail = append(s.tail[:0], p[len(p)-queue.LiveTail:]...)
		return
	}
	if len(s.tail)+len(p) > 2*queue.LiveTail {
		// Drop all but the last LiveTail bytes now and then, so the tail
		// costs an amortized copy per byte.
		s.tail = append(s.tail[:0], s.tail[len(s.tail)-(queue.LiveTail-len(p)):]...)
	}
	s.tail = append(s.tail, p...)
}

// live returns the stream's last bytes (at most queue.LiveTail) and where
// they start.
func (s *sink) live() queue.LiveStream {
	data := s.tail
	if len(data) > queue.LiveTail {
		data = data[len(data)-queue.LiveTail:]
	}
	return queue.LiveStream{From: s.stored - int64(len(data)), Data: append([]byte(nil), data...)}
}

// live returns what both streams have stored so far, for live output, and
// ok false once the result is being recorded.
func (o *outputs) live() (stdout, stderr queue.LiveStream, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.finished {
		return stdout, stderr, false
	}
	return o.stdout.live(), o.stderr.live(), true
}

// appendLine adds a line the runner itself writes (a validation reason, a
// panic) to stderr, on a line of its own.
func (o *outputs) appendLine(line string) {
	o.mu.Lock()
	needNL := false
	if !o.spilled {
		last, ok := o.stderr.mem.lastByte()
		needNL = ok && last != '\n'
	}
	o.mu.Unlock()
	if needNL {
		line = "\n" + line
	}
	if len(line) > 0 && line[len(line)-1] != '\n' {
		line += "\n"
	}
	// The runner's own lines are kept past max_output: they say why the
	// task ended.
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.finished {
		o.stderr.writeLocked([]byte(line))
	}
}

// finish returns what the task document's stdout and stderr get: strings
// when the output may stay in the document (gfs false or auto, it fits, and
// it is text: gridfs.Text), else the ids of the GridFS files it was stored
// in.
func (o *outputs) finish() (stdout, stderr any, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished = true
	if !o.spilled {
		stdout, stderr := o.stdout.mem.String(), o.stderr.mem.String()
		if gridfs.Text([]byte(stdout)) && gridfs.Text([]byte(stderr)) {
			return stdout, stderr, nil
		}
		if err := o.spillLocked(); err != nil {
			return nil, nil, err
		}
	}
	for _, s := range []*sink{o.stdout, o.stderr} {
		if err := s.file.Close(); err != nil {
			return nil, nil, err
		}
	}
	return o.stdout.file.ID(), o.stderr.file.ID(), nil
}

// toGridFS stores output that was to go into the task document in GridFS
// instead (when the task document can no longer take it) and returns the
// file ids.
func (o *outputs) toGridFS(ctx context.Context, stdout, stderr any) (outID, errID bson.ObjectID, err error) {
	put := func(name string, v any) (bson.ObjectID, error) {
		if id, ok := v.(bson.ObjectID); ok {
			return id, nil
		}
		s, _ := v.(string)
		return o.bucket.Put(ctx, name, o.metadata(), []byte(s))
	}
	if outID, err = put("stdout", stdout); err != nil {
		return outID, errID, err
	}
	errID, err = put("stderr", stderr)
	return outID, errID, err
}
