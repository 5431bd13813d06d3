package sandbox

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter closes the ways to execute a file Landlock never
// sees a path for: a file on the kernel's internal shared-memory mount,
// made by memfd_create(2) and executed through /proc/self/fd/N or
// execveat(fd, "", AT_EMPTY_PATH), or loaded by the dynamic loader run as
// a program (ld-linux-x86-64.so.2 /proc/self/fd/N). Landlock allows every
// access to such internal files, and that mount is never noexec (a memfd
// sealed against execve, MFD_NOEXEC_SEAL, can still be mapped for
// execution), so without the filter any allowed program that can make
// system calls of its own (python3, perl) can write an ELF into a memfd
// and run it. The filter, inherited by the program and all it starts and
// never lifted, refuses with EPERM:
//
//   - memfd_create, whatever its flags: programs that use memfds for data
//     fall back to /dev/shm or temporary files, which are paths Landlock
//     and the task's noexec mounts check;
//   - memfd_secret;
//   - execveat with AT_EMPTY_PATH (fexecve(3)): executing a descriptor
//     rather than a path.
//
// The same rules hold for the 32-bit system calls of a 64-bit kernel
// (i386 on amd64, arm on arm64) and for x32's numbers. Other architectures
// have no filter here, and the sandbox refuses to start programs there.

// seccomp_data offsets (linux/seccomp.h).
const (
	offNR   = 0
	offArch = 4
	offArgs = 16 // args[i] at 16+8*i; the low 32 bits first (little endian)
)

// x32Bit marks x32 system calls on an x86-64 kernel.
const x32Bit = 0x40000000

// syscalls are the numbers the filter checks on one architecture.
type syscalls struct {
	arch                               uint32
	memfdCreate, memfdSecret, execveat []uint32
	// socket and socketcall (i386's multiplexer, whose arguments are in
	// memory the filter cannot read) for the network filter.
	socket, socketcall []uint32
}

// filtered returns the architectures the filter covers on GOARCH, the
// native one first; none where den has no table.
func filtered() []syscalls {
	switch runtime.GOARCH {
	case "amd64":
		return []syscalls{
			{arch: unix.AUDIT_ARCH_X86_64, memfdCreate: []uint32{319, x32Bit | 319}, memfdSecret: []uint32{447, x32Bit | 447}, execveat: []uint32{322, x32Bit | 545},
				socket: []uint32{41, x32Bit | 41}},
			{arch: unix.AUDIT_ARCH_I386, memfdCreate: []uint32{356}, memfdSecret: []uint32{447}, execveat: []uint32{358},
				socket: []uint32{359}, socketcall: []uint32{102}},
		}
	case "arm64":
		return []syscalls{
			{arch: unix.AUDIT_ARCH_AARCH64, memfdCreate: []uint32{279}, memfdSecret: []uint32{447}, execveat: []uint32{281},
				socket: []uint32{198}},
			{arch: unix.AUDIT_ARCH_ARM, memfdCreate: []uint32{385}, memfdSecret: []uint32{447}, execveat: []uint32{387},
				socket: []uint32{281}},
		}
	}
	return nil
}

// asm assembles a classic BPF program whose jumps name labels.
type asm struct {
	prog   []unix.SockFilter
	labels map[string]int
	fix    []fixup
}

type fixup struct {
	at     int
	jt, jf string
}

func (a *asm) label(name string) { a.labels[name] = len(a.prog) }

func (a *asm) stmt(code uint16, k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

// jump appends a conditional jump; an empty label is the next instruction.
func (a *asm) jump(code uint16, k uint32, jt, jf string) {
	a.fix = append(a.fix, fixup{at: len(a.prog), jt: jt, jf: jf})
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

func (a *asm) done() ([]unix.SockFilter, error) {
	for _, f := range a.fix {
		for _, j := range []struct {
			label string
			to    *uint8
		}{{f.jt, &a.prog[f.at].Jt}, {f.jf, &a.prog[f.at].Jf}} {
			if j.label == "" {
				continue
			}
			target, ok := a.labels[j.label]
			off := target - f.at - 1
			if !ok || off < 0 || off > 255 {
				return nil, fmt.Errorf("seccomp filter: bad jump to %q", j.label)
			}
			*j.to = uint8(off)
		}
	}
	return a.prog, nil
}

const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	ldAbs    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeq      = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jset     = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	ret      = unix.BPF_RET | unix.BPF_K
)

// memfdFilter builds the filter for archs; a system call of any other
// architecture is refused.
func memfdFilter(archs []syscalls) ([]unix.SockFilter, error) {
	a := &asm{labels: map[string]int{}}
	a.stmt(ldAbs, offArch)
	for i, s := range archs {
		p := func(name string) string { return fmt.Sprintf("%d.%s", i, name) }
		a.jump(jeq, s.arch, "", p("next"))
		a.stmt(ldAbs, offNR)
		for _, nr := range s.memfdCreate {
			a.jump(jeq, nr, p("memfd"), "")
		}
		for _, nr := range s.memfdSecret {
			a.jump(jeq, nr, p("deny"), "")
		}
		for _, nr := range s.execveat {
			a.jump(jeq, nr, p("execveat"), "")
		}
		a.stmt(ret, retAllow)
		a.label(p("memfd")) // memfd_create(name, flags), whatever its flags
		a.stmt(ret, retEPERM)
		a.label(p("execveat")) // execveat(dirfd, path, argv, envp, flags)
		a.stmt(ldAbs, offArgs+8*4)
		a.jump(jset, unix.AT_EMPTY_PATH, p("deny"), p("allow"))
		a.label(p("allow"))
		a.stmt(ret, retAllow)
		a.label(p("deny"))
		a.stmt(ret, retEPERM)
		a.label(p("next"))
	}
	a.stmt(ret, retEPERM)
	return a.done()
}

// ipprotoMPTCP is Multipath TCP's protocol number (linux/in.h).
const ipprotoMPTCP = 262

// mptcpFilter builds the filter that keeps a restricted network
// restricted: Landlock's TCP rules (ABI 4 to at least 7) check only
// sockets of protocol TCP, and a Multipath TCP socket connects to any TCP
// server, falling back to plain TCP where the server has no MPTCP. So
// socket(…, IPPROTO_MPTCP) fails with EPROTONOSUPPORT, as on a kernel
// without MPTCP (programs then fall back to TCP, which Landlock checks),
// and i386's socketcall, whose arguments the filter cannot see, with
// ENOSYS (the C library then uses socket itself). The memfd filter
// already refuses other architectures.
func mptcpFilter(archs []syscalls) ([]unix.SockFilter, error) {
	a := &asm{labels: map[string]int{}}
	a.stmt(ldAbs, offArch)
	for i, s := range archs {
		p := func(name string) string { return fmt.Sprintf("%d.%s", i, name) }
		a.jump(jeq, s.arch, "", p("next"))
		a.stmt(ldAbs, offNR)
		for _, nr := range s.socketcall {
			a.jump(jeq, nr, "nosys", "")
		}
		for _, nr := range s.socket {
			a.jump(jeq, nr, p("socket"), "")
		}
		a.stmt(ret, retAllow)
		a.label(p("socket")) // socket(family, type, protocol)
		a.stmt(ldAbs, offArgs+8*2)
		a.jump(jeq, ipprotoMPTCP, "noproto", "allow")
		a.label(p("next"))
	}
	a.label("allow")
	a.stmt(ret, retAllow)
	a.label("noproto")
	a.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPROTONOSUPPORT))
	a.label("nosys")
	a.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	return a.done()
}

// refuseMPTCP installs mptcpFilter on every thread of this process, as
// refuseAnonymousExec does its own.
func refuseMPTCP() error {
	f, err := mptcpFilter(filtered())
	if err != nil {
		return err
	}
	return install(f, "against Multipath TCP sockets")
}

// install installs filter f on every thread (SECCOMP_FILTER_FLAG_TSYNC).
func install(f []unix.SockFilter, what string) error {
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(f)
	switch {
	case errno != 0:
		return fmt.Errorf("seccomp: install the filter %s: %w", what, errno)
	case r != 0:
		return fmt.Errorf("seccomp: thread %d could not take the filter %s", r, what)
	}
	return nil
}

// refuseAnonymousExec installs the filter on every thread of this process
// (SECCOMP_FILTER_FLAG_TSYNC). The calling thread must have no_new_privs
// set (which TSYNC then sets on the others).
func refuseAnonymousExec() error {
	archs := filtered()
	if len(archs) == 0 {
		return fmt.Errorf("seccomp: den has no filter against executing memfds on %s; refusing to start the program", runtime.GOARCH)
	}
	f, err := memfdFilter(archs)
	if err != nil {
		return err
	}
	return install(f, "against executing memfds")
}
