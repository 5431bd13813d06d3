package command_test

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins/command"
)

// databaseAddr returns the test server's IPv4 address and port.
func databaseAddr(t *testing.T) (string, uint16) {
	t.Helper()
	u, err := url.Parse(dentest.URI())
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(strings.Split(u.Host, ",")[0])
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := net.LookupIP(host)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if v4 := a.To4(); v4 != nil {
			p, _ := strconv.Atoi(port)
			return v4.String(), uint16(p)
		}
	}
	t.Skipf("the test server %s has no IPv4 address; the reach helper connects over IPv4", host)
	return "", 0
}

// With command.network none, or a list of ports without the database's, a
// task cannot reach MongoDB, whichever way it makes its connection: TCP;
// Multipath TCP and SMC (AF_SMC, or IPPROTO_SMC on an AF_INET socket),
// which Landlock's TCP rules do not see, so seccomp refuses their sockets
// where the network is restricted (SMC where the kernel has it: this
// test's kernel may not; TestNetworkFilterAllowsOnlyItsSockets holds the
// filter to it on any kernel); a socket made by
// io_uring (IORING_OP_SOCKET), which no seccomp filter sees, so io_uring
// is refused to every task; and TCP Fast Open (sendto or sendmsg with
// MSG_FASTOPEN connects a socket without connect(2), which Landlock
// checks), refused
// by seccomp where the network is restricted. With the database's port
// listed, or all, it can over TCP; Multipath TCP, SMC and Fast Open only
// with all (programs fall back to TCP and connect(2), as on a kernel
// without them); io_uring never.
func TestTaskNetworkByConfiguration(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	if sandbox.LandlockABI() < 4 {
		t.Skipf("this kernel's Landlock ABI is %d: TCP rules need 4", sandbox.LandlockABI())
	}
	ip, port := databaseAddr(t)
	db := ip + ":" + strconv.Itoa(int(port))
	policy, helper := reachPolicy(t)
	other := port + 1
	if other == 0 {
		other = 1
	}
	attempts := []string{"tcp", "mptcp", "uring-tcp", "uring-mptcp", "tfo", "tfo-sendmsg", "smc", "inet-smc"}
	smc := kernelHasSMC()
	t.Logf("this kernel has SMC: %v", smc)
	for _, tc := range []struct {
		name    string
		network command.Network
		// reaches says whether each of attempts reaches the database.
		reaches []bool
	}{
		{"none", command.Network{None: true}, []bool{false, false, false, false, false, false, false, false}},
		{"other ports", command.Network{Ports: []uint16{other, 443}}, []bool{false, false, false, false, false, false, false, false}},
		{"no port", command.Network{Ports: []uint16{}}, []bool{false, false, false, false, false, false, false, false}},
		{"the database's port", command.Network{Ports: []uint16{other, port}}, []bool{true, false, false, false, false, false, false, false}},
		{"all", command.Network{}, []bool{true, true, false, false, true, true, smc, smc}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := asTaskUser(policy)
			p.Network = tc.network
			argv := bson.A{helper}
			for _, a := range attempts {
				argv = append(argv, a+":"+db)
			}
			raw := runTask(t, p, bson.D{{Key: "command", Value: argv}})
			stdout := text(t, raw, "stdout")
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if len(lines) != len(attempts) {
				t.Fatalf("stdout %q, stderr %q", stdout, text(t, raw, "stderr"))
			}
			for i, l := range lines {
				if ok := strings.HasSuffix(l, ": ok"); ok != tc.reaches[i] {
					t.Errorf("network %s: %s (want reached %v)", tc.network, l, tc.reaches[i])
				}
			}
			t.Logf("network %s: %q", tc.network, stdout)
		})
	}
}

// kernelHasSMC reports whether this kernel makes SMC sockets (AF_SMC).
func kernelHasSMC() bool {
	fd, err := syscall.Socket(43 /* AF_SMC */, syscall.SOCK_STREAM, 0)
	if err != nil {
		return false
	}
	syscall.Close(fd)
	return true
}

// With the network restricted (a list of ports), a task makes only the
// sockets of the network filter's allowlist: unix sockets (and pairs),
// IPv4 and IPv6 TCP, UDP and ICMP sockets, and NETLINK_ROUTE get what the
// kernel gives them with network all; every other family fails with
// EAFNOSUPPORT (AF_SMC, AF_VSOCK, AF_PACKET), another type of IPv4 socket
// with ESOCKTNOSUPPORT (raw), another protocol with EPROTONOSUPPORT
// (IPPROTO_SMC, Multipath TCP, UDP-Lite, netlink's sock_diag). With
// network all, the same program makes those the kernel has (here vsock,
// UDP-Lite, Multipath TCP and sock_diag): what refuses them is the filter.
func TestTaskSocketsByNetwork(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	if sandbox.LandlockABI() < 4 {
		t.Skipf("this kernel's Landlock ABI is %d: TCP rules need 4", sandbox.LandlockABI())
	}
	policy, helper := reachPolicy(t)
	const (
		same     = "" // as with network all
		family   = "address family not supported by protocol"
		socktype = "socket type not supported"
		proto    = "protocol not supported"
	)
	for _, tc := range []struct {
		name, attempt, restricted string
	}{
		{"unix stream", "socket:1:1:0", same},
		{"unix datagram", "socket:1:2:0", same},
		{"unix pair", "socketpair:1:1:0", same},
		{"tcp", "socket:2:1:0", same},
		{"tcp by number", "socket:2:1:6", same},
		{"tcp6", "socket:10:1:6", same},
		{"udp", "socket:2:2:0", same},
		{"udp6", "socket:10:2:17", same},
		{"ping", "socket:2:2:1", same},
		{"netlink route", "socket:16:3:0", same},
		{"smc", "socket:43:1:0", family},
		{"smc6", "socket:43:1:1", family},
		{"ipv4 smc", "socket:2:1:256", proto},
		{"ipv6 smc", "socket:10:1:256", proto},
		{"mptcp", "socket:2:1:262", proto},
		{"udp-lite", "socket:2:2:136", proto},
		{"raw", "socket:2:3:6", socktype},
		{"vsock", "socket:40:1:0", family},
		{"packet", "socket:17:3:0", family},
		{"netlink sock_diag", "socket:16:3:4", proto},
		{"tipc pair", "socketpair:30:1:0", family},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run := func(network command.Network) string {
				p := asTaskUser(policy)
				p.Network = network
				raw := runTask(t, p, bson.D{{Key: "command", Value: bson.A{helper, tc.attempt}}})
				out, ok := strings.CutPrefix(text(t, raw, "stdout"), tc.attempt+": ")
				if !ok {
					t.Fatalf("network %s: stdout %q, stderr %q", network, text(t, raw, "stdout"), text(t, raw, "stderr"))
				}
				return strings.TrimSuffix(out, "\n")
			}
			all, restricted := run(command.Network{}), run(command.Network{Ports: []uint16{443}})
			want := tc.restricted
			if want == same {
				want = all
			}
			if restricted != want {
				t.Errorf("%s with network [443]: %q, want %q (network all: %q)", tc.attempt, restricted, want, all)
			}
			t.Logf("%s: network all %q, [443] %q", tc.attempt, all, restricted)
		})
	}
}
