package sandbox

import (
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The sandbox installs two seccomp filters, inherited by the program and
// all it starts and never lifted.
//
// The task filter, everywhere, refuses:
//
//   - with EPERM, the ways to execute a file Landlock never sees a path
//     for: a file on the kernel's internal shared-memory mount, made by
//     memfd_create(2) and executed through /proc/self/fd/N or
//     execveat(fd, "", AT_EMPTY_PATH), or loaded by the dynamic loader
//     run as a program (ld-linux-x86-64.so.2 /proc/self/fd/N). Landlock
//     allows every access to such internal files, and that mount is never
//     noexec (a memfd sealed against execve, MFD_NOEXEC_SEAL, can still be
//     mapped for execution), so without the filter any allowed program
//     that can make system calls of its own (python3, perl) can write an
//     ELF into a memfd and run it. So memfd_create, whatever its flags
//     (programs that use memfds for data fall back to /dev/shm or
//     temporary files, which are paths Landlock and the task's noexec
//     mounts check); memfd_secret; and execveat with AT_EMPTY_PATH
//     (fexecve(3): executing a descriptor rather than a path);
//   - with ENOSYS, as a kernel built without them: io_uring_setup,
//     io_uring_enter and io_uring_register. io_uring makes system calls
//     on the program's behalf (IORING_OP_SOCKET, _CONNECT, _SENDMSG,
//     _OPENAT, ...) that no seccomp filter ever sees, so it is a second
//     door to every call a filter refuses: a Multipath TCP socket made by
//     IORING_OP_SOCKET reached the database past command.network. Programs
//     that use it (liburing, libuv) fall back to ordinary calls;
//   - with ENOSYS, add_key, request_key and keyctl: the kernel's keyrings
//     are not namespaced, and a key a task adds to its user's keyring
//     outlives it and is there for every later task of that user (as
//     Docker's default profile refuses them).
//
// The network filter, where the network is restricted (Spec.Network),
// keeps Landlock's TCP rules whole; see networkFilter.
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

// syscalls are the numbers the filters check on one architecture.
type syscalls struct {
	arch                               uint32
	memfdCreate, memfdSecret, execveat []uint32
	// ioUring and keys: refused whatever their arguments.
	ioUring, keys []uint32
	// socket, socketpair and socketcall (i386's multiplexer, whose
	// arguments are in memory the filter cannot read) for the network
	// filter; sendto, sendmsg and sendmmsg for its TCP Fast Open rule.
	socket, socketpair, socketcall []uint32
	sendto, sendmsg, sendmmsg      []uint32
}

// ioUringNR are io_uring_setup, io_uring_enter and io_uring_register,
// whose numbers every architecture shares.
var ioUringNR = []uint32{425, 426, 427}

// filtered returns the architectures the filter covers on this GOARCH.
func filtered() []syscalls { return filteredOn(runtime.GOARCH) }

// filteredOn returns the architectures the filter covers on goarch, the
// native one first; none where den has no table.
func filteredOn(goarch string) []syscalls {
	x32 := func(nrs ...uint32) []uint32 {
		out := slices.Clone(nrs)
		for _, nr := range nrs {
			out = append(out, x32Bit|nr)
		}
		return out
	}
	switch goarch {
	case "amd64":
		return []syscalls{
			{arch: unix.AUDIT_ARCH_X86_64, memfdCreate: x32(319), memfdSecret: x32(447), execveat: []uint32{322, x32Bit | 545},
				ioUring: x32(ioUringNR...), keys: x32(248, 249, 250),
				// x32's sendmsg and sendmmsg have numbers of their own
				// (518, 538); its 46 and 307 are no system call.
				socket: x32(41), socketpair: x32(53), sendto: x32(44), sendmsg: []uint32{46, x32Bit | 46, x32Bit | 518}, sendmmsg: []uint32{307, x32Bit | 307, x32Bit | 538}},
			{arch: unix.AUDIT_ARCH_I386, memfdCreate: []uint32{356}, memfdSecret: []uint32{447}, execveat: []uint32{358},
				ioUring: ioUringNR, keys: []uint32{286, 287, 288},
				socket: []uint32{359}, socketpair: []uint32{360}, socketcall: []uint32{102}, sendto: []uint32{369}, sendmsg: []uint32{370}, sendmmsg: []uint32{345}},
		}
	case "arm64":
		return []syscalls{
			{arch: unix.AUDIT_ARCH_AARCH64, memfdCreate: []uint32{279}, memfdSecret: []uint32{447}, execveat: []uint32{281},
				ioUring: ioUringNR, keys: []uint32{217, 218, 219},
				socket: []uint32{198}, socketpair: []uint32{199}, sendto: []uint32{206}, sendmsg: []uint32{211}, sendmmsg: []uint32{269}},
			{arch: unix.AUDIT_ARCH_ARM, memfdCreate: []uint32{385}, memfdSecret: []uint32{447}, execveat: []uint32{387},
				ioUring: ioUringNR, keys: []uint32{309, 310, 311},
				socket: []uint32{281}, socketpair: []uint32{288}, sendto: []uint32{290}, sendmsg: []uint32{296}, sendmmsg: []uint32{374}},
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
	aluAnd   = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	ret      = unix.BPF_RET | unix.BPF_K
)

func errno(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }

// taskFilter builds the task filter for archs; a system call of any other
// architecture is refused.
func taskFilter(archs []syscalls) ([]unix.SockFilter, error) {
	a := &asm{labels: map[string]int{}}
	a.stmt(ldAbs, offArch)
	for i, s := range archs {
		p := func(name string) string { return fmt.Sprintf("%d.%s", i, name) }
		a.jump(jeq, s.arch, "", p("next"))
		a.stmt(ldAbs, offNR)
		for _, nr := range s.memfdCreate {
			a.jump(jeq, nr, "eperm", "")
		}
		for _, nr := range s.memfdSecret {
			a.jump(jeq, nr, "eperm", "")
		}
		for _, nr := range slices.Concat(s.ioUring, s.keys) {
			a.jump(jeq, nr, "enosys", "")
		}
		for _, nr := range s.execveat {
			a.jump(jeq, nr, p("execveat"), "")
		}
		a.stmt(ret, retAllow)
		a.label(p("execveat")) // execveat(dirfd, path, argv, envp, flags)
		a.stmt(ldAbs, offArgs+8*4)
		a.jump(jset, unix.AT_EMPTY_PATH, "eperm", "allow")
		a.label(p("next"))
	}
	a.stmt(ret, retEPERM)
	a.label("allow")
	a.stmt(ret, retAllow)
	a.label("eperm")
	a.stmt(ret, retEPERM)
	a.label("enosys")
	a.stmt(ret, errno(unix.ENOSYS))
	return a.done()
}

// The sockets a restricted network lets a task make: an allowlist, so
// that a family or protocol the kernel gains later is refused until it is
// looked at. Landlock's TCP rules (ABI 4 to at least 7) check connect(2)
// on TCP sockets only; a socket of any other family or protocol that can
// carry a connection to a TCP server passes them: Multipath TCP
// (IPPROTO_MPTCP), which falls back to plain TCP where the server has no
// MPTCP; SMC (AF_SMC, and IPPROTO_SMC on AF_INET and AF_INET6 sockets),
// which begins as a TCP connection and stays one where the peer has no
// SMC; RDS over TCP (AF_RDS); and families that leave the machine's
// network altogether, such as AF_VSOCK to a virtual machine's host.
var (
	// socketFamilies are the families a task may make sockets of: unix
	// sockets (a path's socket is a file, whose mode and the task's own
	// mount namespace govern it; abstract ones Landlock's scoping), IPv4
	// and IPv6 (inetProtocols), and netlink (netlinkProtocols).
	socketFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}
	// inetTypes and inetProtocols are the IPv4 and IPv6 sockets a task
	// may make: stream and datagram sockets of protocol 0 (TCP, UDP),
	// TCP, UDP, and ICMP and ICMPv6 (unprivileged ping sockets, where
	// net.ipv4.ping_group_range lets the task's group). The kernel itself
	// refuses a type and protocol that do not go together (a stream
	// socket of UDP), so the only stream socket left is TCP's, which
	// Landlock checks. Raw sockets need CAP_NET_RAW, which a task never
	// has, and are refused anyway.
	inetTypes     = []uint32{unix.SOCK_STREAM, unix.SOCK_DGRAM}
	inetProtocols = []uint32{0, unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6}
	// netlinkProtocols: NETLINK_ROUTE alone, which the C library's
	// getaddrinfo (AI_ADDRCONFIG), getifaddrs and if_nameindex read the
	// machine's addresses and interfaces with. The others (sock_diag, as
	// ss uses, generic netlink, audit, uevents) are refused.
	netlinkProtocols = []uint32{unix.NETLINK_ROUTE}
	// pairFamilies are the families of socketpair(2): unix sockets only.
	pairFamilies = []uint32{unix.AF_UNIX}
)

// socketFlags are the flags socket(2) and socketpair(2) take in their
// type argument.
const socketFlags = unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC

// networkFilter builds the filter that keeps a restricted network
// restricted, on top of Landlock's TCP rules:
//
//   - socket(2) only of the families and protocols above: another family
//     fails with EAFNOSUPPORT, another type of IPv4 or IPv6 socket with
//     ESOCKTNOSUPPORT, another protocol with EPROTONOSUPPORT, each as on
//     a kernel without it (programs that try Multipath TCP or SMC first
//     then fall back to TCP, which Landlock checks); socketpair(2) only
//     of unix sockets (EAFNOSUPPORT); i386's socketcall, whose arguments
//     the filter cannot see, fails with ENOSYS (the C library then uses
//     socket and the other calls themselves);
//   - TCP Fast Open: sendto, sendmsg or sendmmsg with MSG_FASTOPEN on a
//     TCP socket never connected connects it (tcp_sendmsg_fastopen), and
//     no LSM hook sees that connection, so Landlock's TCP rules cannot
//     refuse it. They fail with EOPNOTSUPP whatever the socket, as where
//     the kernel's tcp_fastopen client side is off (programs then
//     connect(2) first).
//
// io_uring, which would make these calls unseen, is refused by the task
// filter; the task filter also refuses other architectures.
func networkFilter(archs []syscalls) ([]unix.SockFilter, error) {
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
			a.jump(jeq, nr, "socket", "")
		}
		for _, nr := range s.socketpair {
			a.jump(jeq, nr, "socketpair", "")
		}
		// The flags: sendto(fd, buf, len, flags, …), sendmsg(fd, msg,
		// flags), sendmmsg(fd, vec, vlen, flags).
		for _, nr := range slices.Concat(s.sendto, s.sendmmsg) {
			a.jump(jeq, nr, "flags3", "")
		}
		for _, nr := range s.sendmsg {
			a.jump(jeq, nr, "flags2", "")
		}
		a.stmt(ret, retAllow)
		a.label(p("next"))
	}
	a.stmt(ret, retAllow) // another architecture: the task filter refuses it
	// socket(family, type, protocol): the family, then for IPv4 and IPv6
	// the type (without its flags) and the protocol, for netlink the
	// protocol.
	a.label("socket")
	a.stmt(ldAbs, offArgs)
	a.jump(jeq, unix.AF_INET, "inet", "")
	a.jump(jeq, unix.AF_INET6, "inet", "")
	a.jump(jeq, unix.AF_NETLINK, "netlink", "")
	a.oneOf(socketFamilies, "allow", errno(unix.EAFNOSUPPORT))
	a.label("inet")
	a.stmt(ldAbs, offArgs+8)
	a.stmt(aluAnd, ^uint32(socketFlags))
	a.oneOf(inetTypes, "inetproto", errno(unix.ESOCKTNOSUPPORT))
	a.label("inetproto")
	a.stmt(ldAbs, offArgs+8*2)
	a.oneOf(inetProtocols, "allow", errno(unix.EPROTONOSUPPORT))
	a.label("netlink")
	a.stmt(ldAbs, offArgs+8*2)
	a.oneOf(netlinkProtocols, "allow", errno(unix.EPROTONOSUPPORT))
	a.label("socketpair") // socketpair(family, type, protocol, sv)
	a.stmt(ldAbs, offArgs)
	a.oneOf(pairFamilies, "allow", errno(unix.EAFNOSUPPORT))
	a.label("flags3")
	a.stmt(ldAbs, offArgs+8*3)
	a.jump(jset, unix.MSG_FASTOPEN, "notsupp", "allow")
	a.label("flags2")
	a.stmt(ldAbs, offArgs+8*2)
	a.jump(jset, unix.MSG_FASTOPEN, "notsupp", "allow")
	a.label("allow")
	a.stmt(ret, retAllow)
	a.label("nosys")
	a.stmt(ret, errno(unix.ENOSYS))
	a.label("notsupp")
	a.stmt(ret, errno(unix.EOPNOTSUPP))
	return a.done()
}

// oneOf jumps to label when the accumulator is one of values, and else
// returns refuse.
func (a *asm) oneOf(values []uint32, label string, refuse uint32) {
	for _, v := range values {
		a.jump(jeq, v, label, "")
	}
	a.stmt(ret, refuse)
}

// refuseRestrictedNetwork installs networkFilter on every thread of this
// process, as refuseTaskCalls does its own.
func refuseRestrictedNetwork() error {
	f, err := networkFilter(filtered())
	if err != nil {
		return err
	}
	return install(f, "for the restricted network")
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

// refuseTaskCalls installs the task filter on every thread of this
// process (SECCOMP_FILTER_FLAG_TSYNC). The calling thread must have
// no_new_privs set (which TSYNC then sets on the others).
func refuseTaskCalls() error {
	archs := filtered()
	if len(archs) == 0 {
		return fmt.Errorf("seccomp: den has no filter for %s (against executing memfds, io_uring, keyrings); refusing to start the program", runtime.GOARCH)
	}
	f, err := taskFilter(archs)
	if err != nil {
		return err
	}
	return install(f, "of the task")
}
