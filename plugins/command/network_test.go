package command_test

import (
	"net"
	"net/url"
	"strconv"
	"strings"
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
// Multipath TCP, which Landlock's TCP rules do not see, so seccomp
// refuses its sockets where the network is restricted; a socket made by
// io_uring (IORING_OP_SOCKET), which no seccomp filter sees, so io_uring
// is refused to every task; and TCP Fast Open (sendto or sendmsg with
// MSG_FASTOPEN connects a socket without connect(2), which Landlock
// checks), refused
// by seccomp where the network is restricted. With the database's port
// listed, or all, it can over TCP; Multipath TCP and Fast Open only with
// all (programs fall back to TCP and connect(2), as on a kernel without
// them); io_uring never.
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
	attempts := []string{"tcp", "mptcp", "uring-tcp", "uring-mptcp", "tfo", "tfo-sendmsg"}
	for _, tc := range []struct {
		name    string
		network command.Network
		// reaches says whether each of attempts reaches the database.
		reaches []bool
	}{
		{"none", command.Network{None: true}, []bool{false, false, false, false, false, false}},
		{"other ports", command.Network{Ports: []uint16{other, 443}}, []bool{false, false, false, false, false, false}},
		{"no port", command.Network{Ports: []uint16{}}, []bool{false, false, false, false, false, false}},
		{"the database's port", command.Network{Ports: []uint16{other, port}}, []bool{true, false, false, false, false, false}},
		{"all", command.Network{}, []bool{true, true, false, false, true, true}},
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
