// Command reach is the attacker of the command plugin's reach tests: an
// allowed program that makes the system calls itself, so that no tool's
// own checks stand between it and the kernel. Each argument is one
// attempt, and each prints one line: "<attempt>: ok" or "<attempt>: <the
// kernel's error>".
//
//	signal:PID          kill(PID, 0), then kill(PID, SIGURG)
//	abstract:NAME       connect to the abstract unix socket NAME
//	tcp:IP:PORT         connect over TCP
//	mptcp:IP:PORT       connect over Multipath TCP (IPPROTO_MPTCP)
//	uring-tcp:IP:PORT   a TCP socket made by io_uring (IORING_OP_SOCKET),
//	                    which no seccomp filter sees, then connect(2)
//	uring-mptcp:IP:PORT the same with a Multipath TCP socket
//	tfo:IP:PORT         TCP Fast Open: sendto(MSG_FASTOPEN) on a TCP
//	                    socket never connected, which connects it
//	tfo-sendmsg:IP:PORT the same with sendmsg(MSG_FASTOPEN)
//	smc:IP:PORT         connect over SMC (AF_SMC, which falls back to TCP
//	                    where the server has no SMC)
//	inet-smc:IP:PORT    the same with an AF_INET socket of IPPROTO_SMC
//	socket:F:T:P        make a socket of family F, type T, protocol P
//	                    (numbers), and close it
//	socketpair:F:T:P    make a pair of sockets, and close them
//	addkey:DESC         add a key DESC to the user's keyring (it expires
//	                    after a minute)
//	findkey:DESC        search the user's keyring for the key DESC
//
// Another task's processes (the same user's), by pid, SysV key or uid:
//
//	prlimit:PID         prlimit(PID, RLIMIT_CPU, 1 s)
//	nice:PID            setpriority(PRIO_PROCESS, PID, 19)
//	niceuser:UID        setpriority(PRIO_USER, UID, 19)
//	affinity:PID        sched_setaffinity(PID, CPU 0 only)
//	idle:PID            sched_setscheduler(PID, SCHED_IDLE)
//	ioprio:PID          ioprio_set(IOPRIO_WHO_PROCESS, PID, idle class)
//	fds:PID             list /proc/PID/fd
//	shm:KEY             read the SysV shared memory segment KEY (shmat)
//	msg:KEY             find the SysV message queue KEY
//	sem:KEY             find the SysV semaphore set KEY
//
// Resources:
//
//	alloc:BYTES         allocate BYTES of memory, touching every page
//	spin:N:MS           run N processes (this program again, as busy)
//	                    that spin for MS milliseconds, then kill them and
//	                    print the CPU time they took and the wall time
//	cpucgroup:FILE      write the name of this process's cgroup in the
//	                    cgroup v1 cpu hierarchy into FILE
//	waitfor:FILE        wait until FILE exists
//
// What a task leaves behind:
//
//	shm-hold:KEY:SECRET:FILE  make a SysV shared memory segment KEY (mode
//	                    0600) holding SECRET and keep it until FILE exists,
//	                    then remove it
//	shm-leave:KEY:BYTES make a segment KEY of BYTES, touched, and leave it
//	msg-leave:KEY       make a message queue KEY holding a message, and
//	                    leave it
//	sem-leave:KEY       make a semaphore set KEY and leave it
package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	ipprotoMPTCP = 262
	ipprotoSMC   = 256
	afSMC        = 43
)

func main() {
	for _, arg := range os.Args[1:] {
		kind, target, _ := strings.Cut(arg, ":")
		var err error
		switch kind {
		case "signal":
			pid, _ := strconv.Atoi(target)
			if err = syscall.Kill(pid, 0); err == nil {
				err = syscall.Kill(pid, syscall.SIGURG)
			}
		case "addkey":
			var id int
			if id, err = unix.AddKey("user", target, []byte("den-test-secret"), unix.KEY_SPEC_USER_KEYRING); err == nil {
				_, err = unix.KeyctlInt(unix.KEYCTL_SET_TIMEOUT, id, 60, 0, 0)
			}
		case "findkey":
			_, err = unix.KeyctlSearch(unix.KEY_SPEC_USER_KEYRING, "user", target, 0)
		case "alloc":
			n, _ := strconv.ParseInt(target, 10, 64)
			err = alloc(n)
		case "busy":
			for {
				busy++
			}
		case "spin":
			err = spin(target)
		case "cpucgroup":
			err = cpuCgroup(target)
		case "waitfor":
			waitFor(target)
		case "prlimit":
			pid, _ := strconv.Atoi(target)
			err = unix.Prlimit(pid, unix.RLIMIT_CPU, &unix.Rlimit{Cur: 1, Max: 1}, nil)
		case "nice":
			pid, _ := strconv.Atoi(target)
			err = unix.Setpriority(unix.PRIO_PROCESS, pid, 19)
		case "niceuser":
			uid, _ := strconv.Atoi(target)
			err = unix.Setpriority(unix.PRIO_USER, uid, 19)
		case "affinity":
			pid, _ := strconv.Atoi(target)
			var set unix.CPUSet
			set.Set(0)
			err = unix.SchedSetaffinity(pid, &set)
		case "idle":
			pid, _ := strconv.Atoi(target)
			var param [1]int32
			if _, _, errno := syscall.Syscall(unix.SYS_SCHED_SETSCHEDULER, uintptr(pid), 5 /* SCHED_IDLE */, uintptr(unsafe.Pointer(&param[0]))); errno != 0 {
				err = errno
			}
		case "ioprio":
			pid, _ := strconv.Atoi(target)
			if _, _, errno := syscall.Syscall(unix.SYS_IOPRIO_SET, 1 /* IOPRIO_WHO_PROCESS */, uintptr(pid), 3<<13 /* IOPRIO_CLASS_IDLE */); errno != 0 {
				err = errno
			}
		case "fds":
			_, err = os.ReadDir("/proc/" + target + "/fd")
		case "shm", "msg", "sem":
			key, _ := strconv.Atoi(target)
			err = findIPC(kind, key)
		case "shm-hold", "shm-leave", "msg-leave", "sem-leave":
			err = makeIPC(kind, target)
		case "abstract":
			err = connect(syscall.AF_UNIX, 0, &syscall.SockaddrUnix{Name: "@" + target})
		case "socket", "socketpair":
			err = makeSocket(kind == "socketpair", target)
		case "tcp", "mptcp", "uring-tcp", "uring-mptcp", "tfo", "tfo-sendmsg", "smc", "inet-smc":
			family, proto := syscall.AF_INET, 0
			switch {
			case strings.HasSuffix(kind, "mptcp"):
				proto = ipprotoMPTCP
			case kind == "smc":
				family = afSMC
			case kind == "inet-smc":
				proto = ipprotoSMC
			}
			ap, perr := netip.ParseAddrPort(target)
			if perr != nil {
				err = perr
				break
			}
			sa := &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
			switch kind {
			case "uring-tcp", "uring-mptcp":
				err = uringConnect(proto, sa)
			case "tfo", "tfo-sendmsg":
				err = fastOpen(sa, kind == "tfo-sendmsg")
			default:
				err = connect(family, proto, sa)
			}
		default:
			err = fmt.Errorf("unknown attempt %q", kind)
		}
		if err != nil {
			fmt.Printf("%s: %v\n", arg, err)
		} else {
			fmt.Printf("%s: ok\n", arg)
		}
	}
}

// busy is what a busy process counts.
var busy uint64

// spin runs "N:MS": N busy processes for MS milliseconds, and prints the
// CPU time they took (theirs alone, reaped) and how long they ran.
func spin(target string) error {
	n, ms, _ := strings.Cut(target, ":")
	procs, _ := strconv.Atoi(n)
	wait, _ := strconv.Atoi(ms)
	start := time.Now()
	var running []*exec.Cmd
	defer func() {
		for _, c := range running {
			c.Process.Kill()
			c.Wait()
		}
	}()
	for range procs {
		c := exec.Command("/proc/self/exe", "busy")
		if err := c.Start(); err != nil {
			return err
		}
		running = append(running, c)
	}
	time.Sleep(time.Duration(wait) * time.Millisecond)
	for _, c := range running {
		c.Process.Kill()
		c.Wait()
	}
	wall := time.Since(start)
	running = nil
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return err
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Printf("spin: %d processes used %d ms of CPU in %d ms\n", procs, cpu.Milliseconds(), wall.Milliseconds())
	return nil
}

// cpuCgroup writes the name of this process's cgroup in the cgroup v1
// hierarchy of the cpu controller (the last element of its path) into
// file.
func cpuCgroup(file string) error {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(own), "\n") {
		parts := strings.SplitN(line, ":", 3) // id:controllers:path
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "cpu") {
			// Whole or not at all: the test reads the file once it
			// exists (a file written in place was read empty).
			if err := os.WriteFile(file+".part", []byte(filepath.Base(parts[2])), 0o644); err != nil {
				return err
			}
			return os.Rename(file+".part", file)
		}
	}
	return errors.New("no cgroup v1 cpu hierarchy holds this process")
}

// waitFor waits until file exists.
func waitFor(file string) {
	for {
		if _, err := os.Stat(file); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// held keeps what alloc allocated.
var held [][]byte

// alloc allocates n bytes in chunks of 64 MiB and touches every page, so
// that the kernel gives it the memory.
func alloc(n int64) error {
	for n > 0 {
		chunk := make([]byte, min(n, 64<<20))
		for i := 0; i < len(chunk); i += 4096 {
			chunk[i] = 1
		}
		held = append(held, chunk)
		n -= int64(len(chunk))
	}
	return nil
}

// findIPC finds the SysV object of kind (shm, msg, sem) key; a segment
// it attaches and reads.
func findIPC(kind string, key int) error {
	switch kind {
	case "shm":
		id, err := unix.SysvShmGet(key, 0, 0)
		if err != nil {
			return fmt.Errorf("shmget: %w", err)
		}
		b, err := unix.SysvShmAttach(id, 0, unix.SHM_RDONLY)
		if err != nil {
			return fmt.Errorf("shmat: %w", err)
		}
		defer unix.SysvShmDetach(b)
		if len(b) == 0 || b[0] == 0 {
			return errors.New("attached, but empty")
		}
		return nil
	case "msg":
		_, _, errno := syscall.Syscall(unix.SYS_MSGGET, uintptr(key), 0, 0)
		if errno != 0 {
			return fmt.Errorf("msgget: %w", errno)
		}
	case "sem":
		_, _, errno := syscall.Syscall(unix.SYS_SEMGET, uintptr(key), 0, 0)
		if errno != 0 {
			return fmt.Errorf("semget: %w", errno)
		}
	}
	return nil
}

// makeIPC makes the SysV objects of the shm-hold and *-leave attempts.
func makeIPC(kind, target string) error {
	parts := strings.Split(target, ":")
	key, _ := strconv.Atoi(parts[0])
	switch kind {
	case "shm-hold", "shm-leave":
		size := 4096
		if kind == "shm-leave" && len(parts) > 1 {
			size, _ = strconv.Atoi(parts[1])
		}
		id, err := unix.SysvShmGet(key, size, unix.IPC_CREAT|unix.IPC_EXCL|0o600)
		if err != nil {
			return fmt.Errorf("shmget: %w", err)
		}
		b, err := unix.SysvShmAttach(id, 0, 0)
		if err != nil {
			return fmt.Errorf("shmat: %w", err)
		}
		defer unix.SysvShmDetach(b)
		if kind == "shm-leave" {
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			return nil
		}
		if len(parts) < 3 {
			return errors.New("shm-hold:KEY:SECRET:FILE")
		}
		copy(b, parts[1])
		for {
			if _, err := os.Stat(parts[2]); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		_, err = unix.SysvShmCtl(id, unix.IPC_RMID, nil)
		return err
	case "msg-leave":
		id, _, errno := syscall.Syscall(unix.SYS_MSGGET, uintptr(key), unix.IPC_CREAT|unix.IPC_EXCL|0o600, 0)
		if errno != 0 {
			return fmt.Errorf("msgget: %w", errno)
		}
		msg := struct {
			mtype int64
			text  [8]byte
		}{mtype: 1, text: [8]byte{'s', 'e', 'c', 'r', 'e', 't'}}
		if _, _, errno := syscall.Syscall6(unix.SYS_MSGSND, id, uintptr(unsafe.Pointer(&msg)), 8, unix.IPC_NOWAIT, 0, 0); errno != 0 {
			return fmt.Errorf("msgsnd: %w", errno)
		}
	case "sem-leave":
		if _, _, errno := syscall.Syscall(unix.SYS_SEMGET, uintptr(key), 1, unix.IPC_CREAT|unix.IPC_EXCL|0o600); errno != 0 {
			return fmt.Errorf("semget: %w", errno)
		}
	}
	return nil
}

// makeSocket makes a socket, or a pair, of "family:type:protocol"
// (numbers), and closes it.
func makeSocket(pair bool, spec string) error {
	var n [3]int
	for i, f := range strings.SplitN(spec, ":", 3) {
		n[i], _ = strconv.Atoi(f)
	}
	if pair {
		fds, err := syscall.Socketpair(n[0], n[1], n[2])
		if err == nil {
			syscall.Close(fds[0])
			syscall.Close(fds[1])
		}
		return err
	}
	fd, err := syscall.Socket(n[0], n[1], n[2])
	if err == nil {
		syscall.Close(fd)
	}
	return err
}

func connect(family, proto int, sa syscall.Sockaddr) error {
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, proto)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer syscall.Close(fd)
	return syscall.Connect(fd, sa)
}

// fastOpen connects a TCP socket by sending nothing with MSG_FASTOPEN, as
// a client of TCP Fast Open does instead of connect(2); it is connected
// if it then has a peer.
func fastOpen(sa syscall.Sockaddr, sendmsg bool) error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer syscall.Close(fd)
	if sendmsg {
		if _, err := syscall.SendmsgN(fd, nil, nil, sa, unix.MSG_FASTOPEN); err != nil {
			return fmt.Errorf("sendmsg MSG_FASTOPEN: %w", err)
		}
	} else if err := syscall.Sendto(fd, nil, unix.MSG_FASTOPEN, sa); err != nil {
		return fmt.Errorf("sendto MSG_FASTOPEN: %w", err)
	}
	if _, err := syscall.Getpeername(fd); err != nil {
		return fmt.Errorf("getpeername: %w", err)
	}
	return nil
}

// io_uring's ABI (linux/io_uring.h).
const (
	ioringOpSocket      = 45
	ioringEnterGetevent = 1
	ioringOffSQRing     = 0
	ioringOffCQRing     = 0x8000000
	ioringOffSQEs       = 0x10000000
)

type sqringOffsets struct {
	Head, Tail, RingMask, RingEntries, Flags, Dropped, Array, Resv1 uint32
	UserAddr                                                        uint64
}

type cqringOffsets struct {
	Head, Tail, RingMask, RingEntries, Overflow, CQEs, Flags, Resv1 uint32
	UserAddr                                                        uint64
}

type uringParams struct {
	SQEntries, CQEntries, Flags, SQThreadCPU, SQThreadIdle, Features, WQFd uint32
	Resv                                                                   [3]uint32
	SQOff                                                                  sqringOffsets
	CQOff                                                                  cqringOffsets
}

// sqe is struct io_uring_sqe (64 bytes) with the fields IORING_OP_SOCKET
// reads: fd is the domain, off the type, len the protocol.
type sqe struct {
	Opcode, Flags uint8
	Ioprio        uint16
	Fd            int32
	Off, Addr     uint64
	Len, OpFlags  uint32
	UserData      uint64
	BufIndex      uint16
	Personality   uint16
	FileIndex     uint32
	Addr3, Pad    uint64
}

// uringSocket makes a socket through io_uring: one IORING_OP_SOCKET
// submission, whose completion is the new descriptor.
func uringSocket(family, typ, proto int) (int, error) {
	var p uringParams
	r, _, errno := syscall.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return -1, fmt.Errorf("io_uring_setup: %w", errno)
	}
	ring := int(r)
	defer syscall.Close(ring)
	sqSize := int(p.SQOff.Array + p.SQEntries*4)
	cqSize := int(p.CQOff.CQEs + p.CQEntries*16)
	sq, err := unix.Mmap(ring, ioringOffSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return -1, fmt.Errorf("mmap the submission ring: %w", err)
	}
	defer unix.Munmap(sq)
	cq, err := unix.Mmap(ring, ioringOffCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return -1, fmt.Errorf("mmap the completion ring: %w", err)
	}
	defer unix.Munmap(cq)
	sqes, err := unix.Mmap(ring, ioringOffSQEs, int(p.SQEntries)*64, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return -1, fmt.Errorf("mmap the submissions: %w", err)
	}
	defer unix.Munmap(sqes)
	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	*(*sqe)(unsafe.Pointer(&sqes[0])) = sqe{Opcode: ioringOpSocket, Fd: int32(family), Off: uint64(typ), Len: uint32(proto), UserData: 1}
	tail := *u32(sq, p.SQOff.Tail)
	*u32(sq, p.SQOff.Array+4*(tail&*u32(sq, p.SQOff.RingMask))) = 0
	*u32(sq, p.SQOff.Tail) = tail + 1 // the kernel reads it in io_uring_enter, after this store
	if _, _, errno := syscall.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(ring), 1, 1, ioringEnterGetevent, 0, 0); errno != 0 {
		return -1, fmt.Errorf("io_uring_enter: %w", errno)
	}
	head := *u32(cq, p.CQOff.Head)
	if head == *u32(cq, p.CQOff.Tail) {
		return -1, errors.New("io_uring: no completion")
	}
	cqe := cq[p.CQOff.CQEs+16*(head&*u32(cq, p.CQOff.RingMask)):]
	res := *(*int32)(unsafe.Pointer(&cqe[8]))
	*u32(cq, p.CQOff.Head) = head + 1
	if res < 0 {
		return -1, fmt.Errorf("IORING_OP_SOCKET: %w", syscall.Errno(-res))
	}
	return int(res), nil
}

// uringConnect connects, with connect(2), a socket io_uring made.
func uringConnect(proto int, sa syscall.Sockaddr) error {
	fd, err := uringSocket(syscall.AF_INET, syscall.SOCK_STREAM, proto)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return syscall.Connect(fd, sa)
}
