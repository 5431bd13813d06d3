package contain

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/shirou/gopsutil/v4/process"
	"golang.org/x/sys/unix"
)

var self = int32(os.Getpid())

// Descendants lists the live (not zombie) descendants of root, except the
// processes in skip and their own descendants.
//
// It walks the tree from root through each thread's
// /proc/PID/task/TID/children, so its cost grows with the run's own
// processes, not with every process on the host (a scan of all of /proc
// took 10-20 ms per call with 75 processes here, twice per task, and grows
// with a busy host). Where the kernel has no children files
// (CONFIG_PROC_CHILDREN off) it falls back to that scan. Either way a
// process forked during the walk may be missed; callers look again until
// nothing is left (Stop).
func Descendants(ctx context.Context, root int32, skip ...int32) []int32 {
	return walk(ctx, root, skip, childrenFiles, isZombie)
}

// walk lists root's live descendants (but those in skip and below), the
// children of a process from kids and whether it exited from zombie; a
// kernel without children files scans all of /proc instead.
func walk(ctx context.Context, root int32, skip []int32, kids func(int32) []int32, zombie func(int32) bool) []int32 {
	skipped := map[int32]bool{}
	for _, s := range skip {
		skipped[s] = true
	}
	if !haveChildrenFiles() {
		byParent, err := parents(ctx)
		if err != nil {
			return nil
		}
		kids = func(pid int32) []int32 { return byParent[pid] }
	}
	var out []int32
	seen := map[int32]bool{root: true}
	stack := []int32{root}
	for len(stack) > 0 && ctx.Err() == nil {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range kids(pid) {
			if skipped[c] || seen[c] {
				continue
			}
			seen[c] = true
			stack = append(stack, c)
			if !zombie(c) {
				out = append(out, c)
			}
		}
	}
	return out
}

var (
	childrenOnce  sync.Once
	childrenFound atomic.Bool
)

// haveChildrenFiles reports whether this kernel has
// /proc/PID/task/TID/children.
func haveChildrenFiles() bool {
	childrenOnce.Do(func() {
		_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d/children", syscall.Gettid()))
		childrenFound.Store(err == nil)
	})
	return childrenFound.Load()
}

// childrenFiles returns the children of every thread of pid.
func childrenFiles(pid int32) []int32 {
	dir := "/proc/" + strconv.Itoa(int(pid)) + "/task"
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	threads, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil
	}
	var out []int32
	var buf []byte
	for _, th := range threads {
		b, err := readProc(dir+"/"+th+"/children", &buf)
		if err != nil {
			continue
		}
		out = appendPids(out, b)
	}
	return out
}

// appendPids appends the pids listed in b (decimal, blank-separated).
func appendPids(out []int32, b []byte) []int32 {
	n, in := int64(0), false
	for _, c := range b {
		if c >= '0' && c <= '9' {
			n, in = n*10+int64(c-'0'), true
			continue
		}
		if in && n <= 1<<31-1 {
			out = append(out, int32(n))
		}
		n, in = 0, false
	}
	if in && n <= 1<<31-1 {
		out = append(out, int32(n))
	}
	return out
}

// readProc reads a small /proc or cgroup file whole into *buf (grown as
// needed) with open, read and close only: os.ReadFile also asks the
// file's type and size, twice the system calls, and these files are read
// several times per task.
func readProc(path string, buf *[]byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b, err := readAll(fd, buf, false)
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	return b, nil
}

// seqWhole is the size under which one read of a seq file (every file
// den reads in /proc and in cgroupfs) held the whole file: such a read
// returns whole records until the file's end, the reader's buffer or the
// kernel's page-sized buffer is full, and these files' records are a few
// bytes long (a pid, a stat line). A shorter read needs no second read to
// find the end.
const seqWhole = 2048

// readAll reads fd to its end into *buf, from offset 0 with pread when
// again is set (a kept /proc file, generated anew by a read at offset 0).
func readAll(fd int, buf *[]byte, again bool) ([]byte, error) {
	if len(*buf) == 0 {
		*buf = make([]byte, 4096)
	}
	n := 0
	for {
		if n == len(*buf) {
			*buf = append(*buf, make([]byte, len(*buf))...)
		}
		var m int
		var err error
		if again {
			m, err = unix.Pread(fd, (*buf)[n:], int64(n))
		} else {
			m, err = unix.Read(fd, (*buf)[n:])
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return (*buf)[:n], nil
		}
		n += m
		if m < seqWhole && n < len(*buf) {
			return (*buf)[:n], nil
		}
	}
}

// Tree walks process trees as Descendants does, keeping open the /proc
// files of the processes it is told to keep (a runner's supervisor and its
// worker, walked several times per task) and reading them again from
// offset 0: one pread per thread instead of an open, a read and a close,
// and the thread list read again from its open directory. Other processes
// (a run's programs, which come and go) are read as Descendants reads
// them. A Tree is not safe for concurrent use.
type Tree struct {
	kept map[int32]*keptProc
	buf  []byte
}

// keptProc is the open /proc files of a kept process: its task directory,
// its stat file, and the children file of each of its threads.
type keptProc struct {
	taskDir  int
	stat     int
	children map[string]int // by thread id
}

// NewTree returns a Tree that keeps nothing open yet.
func NewTree() *Tree { return &Tree{kept: map[int32]*keptProc{}} }

// Keep keeps the /proc files of pid open until Forget or Close. Kept
// files stay those of that process: once it has exited it lists no
// children and its stat cannot be read, even if its pid is reused. Forget
// it once reaped.
func (t *Tree) Keep(pid int32) error {
	if _, ok := t.kept[pid]; ok {
		return nil
	}
	dir := "/proc/" + strconv.Itoa(int(pid))
	taskDir, err := unix.Open(dir+"/task", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("keep %s/task open: %w", dir, err)
	}
	stat, err := unix.Open(dir+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(taskDir)
		return fmt.Errorf("keep %s/stat open: %w", dir, err)
	}
	t.kept[pid] = &keptProc{taskDir: taskDir, stat: stat, children: map[string]int{}}
	return nil
}

// Forget closes the files kept for pid.
func (t *Tree) Forget(pid int32) {
	k, ok := t.kept[pid]
	if !ok {
		return
	}
	delete(t.kept, pid)
	unix.Close(k.taskDir)
	unix.Close(k.stat)
	for _, fd := range k.children {
		unix.Close(fd)
	}
}

// Close closes every file the tree keeps.
func (t *Tree) Close() {
	for pid := range t.kept {
		t.Forget(pid)
	}
}

// Descendants is Descendants, reading kept processes through their open
// files.
func (t *Tree) Descendants(ctx context.Context, root int32, skip ...int32) []int32 {
	return walk(ctx, root, skip, t.children, func(pid int32) bool {
		st, ok := t.ReadStat(pid)
		return !ok || st.State == 'Z'
	})
}

// Unreaped lists root's descendants that have not been reaped: the live
// ones, as Descendants does, and the zombies (exited, not yet waited
// for). A zombie's /proc/PID/stat still holds its CPU and that of the
// children it reaped, which go to its parent's only once the parent reaps
// it: a sum of CPU over the tree must count it.
func (t *Tree) Unreaped(ctx context.Context, root int32) []int32 {
	return walk(ctx, root, nil, t.children, func(int32) bool { return false })
}

// ReadStat is ReadStat, through the open stat file of a kept process.
func (t *Tree) ReadStat(pid int32) (Stat, bool) {
	k, ok := t.kept[pid]
	if !ok {
		return ReadStat(pid)
	}
	b, err := readAll(k.stat, &t.buf, true)
	if err != nil {
		return Stat{}, false
	}
	return parseStat(b)
}

// children lists the children of every thread of pid.
func (t *Tree) children(pid int32) []int32 {
	k, ok := t.kept[pid]
	if !ok {
		return childrenFiles(pid)
	}
	threads, err := k.threads(&t.buf)
	if err != nil {
		return nil // it has exited: its children are re-parented
	}
	var out []int32
	for _, tid := range threads {
		fd, ok := k.children[tid]
		if !ok {
			path := "/proc/" + strconv.Itoa(int(pid)) + "/task/" + tid + "/children"
			if fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
				continue // the thread has exited
			}
			k.children[tid] = fd
		}
		b, err := readAll(fd, &t.buf, true)
		if err != nil {
			continue
		}
		out = appendPids(out, b)
	}
	// Threads that have exited: their files go.
	if len(k.children) > len(threads) {
		for tid, fd := range k.children {
			if !slices.Contains(threads, tid) {
				unix.Close(fd)
				delete(k.children, tid)
			}
		}
	}
	return out
}

// threads lists the thread ids of a kept process, reading its task
// directory again from the start.
func (k *keptProc) threads(buf *[]byte) ([]string, error) {
	if _, err := unix.Seek(k.taskDir, 0, 0); err != nil {
		return nil, err
	}
	if len(*buf) == 0 {
		*buf = make([]byte, 4096)
	}
	var names []string
	for {
		n, err := unix.Getdents(k.taskDir, *buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent((*buf)[:n], -1, names)
	}
}

// parents maps each process on the host to its children (the fallback
// scan of all of /proc).
func parents(ctx context.Context) (map[int32][]int32, error) {
	procs, err := process.ProcessesWithContext(ctx)
	if err != nil {
		return nil, err
	}
	byParent := map[int32][]int32{}
	for _, p := range procs {
		if ppid, err := p.PpidWithContext(ctx); err == nil {
			byParent[ppid] = append(byParent[ppid], p.Pid)
		}
	}
	return byParent, nil
}

// isZombie reports whether pid has exited and waits to be reaped (or is
// gone).
func isZombie(pid int32) bool {
	st, ok := ReadStat(pid)
	return !ok || st.State == 'Z'
}
