package sandbox

import (
	"encoding/binary"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// runFilter runs a classic BPF seccomp filter on one system call, as the
// kernel does, and returns its action. It knows the instructions den's
// filters use; any other fails the test.
func runFilter(t *testing.T, prog []unix.SockFilter, arch, nr uint32, args ...uint64) uint32 {
	t.Helper()
	var data [64]byte // struct seccomp_data
	binary.NativeEndian.PutUint32(data[offNR:], nr)
	binary.NativeEndian.PutUint32(data[offArch:], arch)
	for i, v := range args {
		binary.NativeEndian.PutUint64(data[offArgs+8*i:], v)
	}
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case ldAbs:
			acc = binary.NativeEndian.Uint32(data[in.K:])
		case aluAnd:
			acc &= in.K
		case jeq, jset:
			hit := acc == in.K
			if in.Code == jset {
				hit = acc&in.K != 0
			}
			if hit {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case ret:
			return in.K
		default:
			t.Fatalf("instruction %d: code %#x unknown to this test", pc, in.Code)
		}
	}
	t.Fatal("the filter ran off its end")
	return 0
}

// The network filter lets a task make only the sockets of its allowlist,
// on every architecture den has a table for (i386, x32 and arm calls of a
// 64-bit kernel too): unix sockets, IPv4 and IPv6 TCP, UDP and ICMP
// sockets, and NETLINK_ROUTE. SMC (AF_SMC, and IPPROTO_SMC on an IPv4 or
// IPv6 socket) and Multipath TCP, which carry connections to TCP servers
// that Landlock's TCP rules do not see, are refused whether or not the
// kernel has them, and so is every other family and protocol. TCP Fast
// Open is refused; i386's socketcall too. TestTaskSocketsByNetwork tries
// the same on this kernel, as a task.
func TestNetworkFilterAllowsOnlyItsSockets(t *testing.T) {
	t.Parallel()
	const (
		afSMC       = 43
		ipprotoSMC  = 256
		ipprotoSCTP = 132
		udpLite     = 136
		allow       = retAllow
	)
	family, socktype, proto, notsupp := uint32(unix.EAFNOSUPPORT), uint32(unix.ESOCKTNOSUPPORT), uint32(unix.EPROTONOSUPPORT), uint32(unix.EOPNOTSUPP)
	sock := func(f, ty, p uint64) []uint64 { return []uint64{f, ty, p} }
	cases := []struct {
		name string
		call string // socket, socketpair, sendto, sendmsg
		args []uint64
		want uint32 // retAllow, or the errno
	}{
		{"unix stream", "socket", sock(unix.AF_UNIX, unix.SOCK_STREAM, 0), allow},
		{"unix datagram", "socket", sock(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0), allow},
		{"unix seqpacket", "socket", sock(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0), allow},
		{"tcp", "socket", sock(unix.AF_INET, unix.SOCK_STREAM, 0), allow},
		{"tcp nonblocking", "socket", sock(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP), allow},
		{"tcp6", "socket", sock(unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_TCP), allow},
		{"udp", "socket", sock(unix.AF_INET, unix.SOCK_DGRAM, 0), allow},
		{"udp6", "socket", sock(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK, unix.IPPROTO_UDP), allow},
		{"ping", "socket", sock(unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP), allow},
		{"ping6", "socket", sock(unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_ICMPV6), allow},
		{"netlink route", "socket", sock(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE), allow},
		{"smc", "socket", sock(afSMC, unix.SOCK_STREAM, 0), family},
		{"smc6", "socket", sock(afSMC, unix.SOCK_STREAM, 1), family},
		{"ipv4 smc", "socket", sock(unix.AF_INET, unix.SOCK_STREAM, ipprotoSMC), proto},
		{"ipv6 smc", "socket", sock(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, ipprotoSMC), proto},
		{"mptcp", "socket", sock(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP), proto},
		{"mptcp6", "socket", sock(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, unix.IPPROTO_MPTCP), proto},
		{"sctp", "socket", sock(unix.AF_INET, unix.SOCK_STREAM, ipprotoSCTP), proto},
		{"udp-lite", "socket", sock(unix.AF_INET, unix.SOCK_DGRAM, udpLite), proto},
		{"protocol in the high bits", "socket", sock(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP|1<<40), proto},
		{"raw", "socket", sock(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP), socktype},
		{"seqpacket", "socket", sock(unix.AF_INET6, unix.SOCK_SEQPACKET, 0), socktype},
		{"vsock", "socket", sock(unix.AF_VSOCK, unix.SOCK_STREAM, 0), family},
		{"rds", "socket", sock(unix.AF_RDS, unix.SOCK_SEQPACKET, 0), family},
		{"packet", "socket", sock(unix.AF_PACKET, unix.SOCK_RAW, 0), family},
		{"xdp", "socket", sock(unix.AF_XDP, unix.SOCK_RAW, 0), family},
		{"alg", "socket", sock(unix.AF_ALG, unix.SOCK_SEQPACKET, 0), family},
		{"tipc", "socket", sock(unix.AF_TIPC, unix.SOCK_STREAM, 0), family},
		{"no family", "socket", sock(0xffff, unix.SOCK_STREAM, 0), family},
		{"netlink sock_diag", "socket", sock(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_SOCK_DIAG), proto},
		{"netlink generic", "socket", sock(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_GENERIC), proto},
		{"unix pair", "socketpair", sock(unix.AF_UNIX, unix.SOCK_STREAM, 0), allow},
		{"tipc pair", "socketpair", sock(unix.AF_TIPC, unix.SOCK_STREAM, 0), family},
		{"smc pair", "socketpair", sock(afSMC, unix.SOCK_STREAM, 0), family},
		{"sendto", "sendto", []uint64{3, 0, 0, 0}, allow},
		{"sendto fast open", "sendto", []uint64{3, 0, 0, unix.MSG_FASTOPEN}, notsupp},
		{"sendmsg fast open", "sendmsg", []uint64{3, 0, unix.MSG_FASTOPEN | unix.MSG_NOSIGNAL}, notsupp},
	}
	for _, goarch := range []string{"amd64", "arm64"} {
		archs := filteredOn(goarch)
		prog, err := networkFilter(archs)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range archs {
			calls := map[string][]uint32{"socket": s.socket, "socketpair": s.socketpair, "sendto": s.sendto, "sendmsg": s.sendmsg}
			for _, tc := range cases {
				for _, nr := range calls[tc.call] {
					want := tc.want
					if want != allow {
						want = errno(unix.Errno(want))
					}
					if got := runFilter(t, prog, s.arch, nr, tc.args...); got != want {
						t.Errorf("%s, arch %#x, %s (call %#x) %v: filter says %s, want %s", goarch, s.arch, tc.name, nr, tc.args, action(got), action(want))
					}
				}
			}
			for _, nr := range s.socketcall {
				if got := runFilter(t, prog, s.arch, nr, unix.SYS_SOCKET); got != errno(unix.ENOSYS) {
					t.Errorf("%s, arch %#x: socketcall: filter says %s, want ENOSYS", goarch, s.arch, action(got))
				}
			}
			// Calls the filter does not look at pass.
			if got := runFilter(t, prog, s.arch, 1, 2, 3); got != allow {
				t.Errorf("%s, arch %#x: call 1: filter says %s", goarch, s.arch, action(got))
			}
		}
	}
}

// action names a seccomp action for messages.
func action(a uint32) string {
	if a == retAllow {
		return "allow"
	}
	if a&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO {
		return unix.ErrnoName(unix.Errno(a & unix.SECCOMP_RET_DATA))
	}
	return fmt.Sprintf("%#x", a)
}
