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
package main

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
)

const ipprotoMPTCP = 262

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
		case "abstract":
			err = connect(syscall.AF_UNIX, 0, &syscall.SockaddrUnix{Name: "@" + target})
		case "tcp", "mptcp":
			proto := 0
			if kind == "mptcp" {
				proto = ipprotoMPTCP
			}
			ap, perr := netip.ParseAddrPort(target)
			if perr != nil {
				err = perr
				break
			}
			err = connect(syscall.AF_INET, proto, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()})
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

func connect(family, proto int, sa syscall.Sockaddr) error {
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, proto)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer syscall.Close(fd)
	return syscall.Connect(fd, sa)
}
