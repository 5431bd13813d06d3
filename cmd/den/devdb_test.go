package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/devdb"
)

// listening is what a process listens on: TCP ports (IPv4 and IPv6) and
// unix sockets' paths ("" for abstract or unnamed ones).
type listening struct {
	tcp  []int
	unix []string
}

// listeningOf reads from /proc which sockets the process pid listens on.
func listeningOf(t *testing.T, pid int) listening {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var l listening
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		for _, f := range procTable(t, table) {
			// sl local_address rem_address st ... inode (field 9)
			if len(f) > 9 && f[3] == "0A" && inodes[f[9]] {
				_, port, _ := strings.Cut(f[1], ":")
				p, _ := strconv.ParseInt(port, 16, 32)
				l.tcp = append(l.tcp, int(p))
			}
		}
	}
	for _, f := range procTable(t, "/proc/net/unix") {
		// Num RefCount Protocol Flags Type St Inode Path; a listening
		// socket has __SO_ACCEPTCON (0x10000) among its flags.
		if len(f) < 7 || !inodes[f[6]] {
			continue
		}
		if flags, _ := strconv.ParseUint(f[3], 16, 32); flags&0x10000 == 0 {
			continue
		}
		path := ""
		if len(f) > 7 {
			path = f[7]
		}
		l.unix = append(l.unix, path)
	}
	return l
}

// procTable returns the lines of a /proc/net table after its header, split
// into fields.
func procTable(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows [][]string
	sc := bufio.NewScanner(f)
	sc.Scan()
	for sc.Scan() {
		rows = append(rows, strings.Fields(sc.Text()))
	}
	return rows
}

// den devdb listens on the one TCP port it prints, and says on its start
// line who can reach it; FerretDB's socket and PostgreSQL's are unix
// sockets in directories of mode 0700 (den's user's, and the cluster's
// user's), and no PostgreSQL process listens on a TCP port. Red on main:
// den devdb listened on a second, unprinted port (FerretDB's own, which
// skips the proxy that makes findAndModify atomic), and said nothing of
// who can reach the first.
func TestDevdbListensOnThePrintedPortAlone(t *testing.T) {
	t.Parallel()
	if _, err := devdb.FindPostgres(""); err != nil {
		t.Skipf("PostgreSQL is not installed: %v", err)
	}
	data := filepath.Join(t.TempDir(), "data")
	cmd, stdout, stderr := start(t, "devdb", "--data", data, "--listen", "127.0.0.1:0", "--engine", "postgresql")
	uri := devURI(t, stdout)
	port, err := strconv.Atoi(strings.TrimSuffix(uri[strings.LastIndexByte(uri, ':')+1:], "/"))
	if err != nil {
		t.Fatalf("den devdb printed %q", uri)
	}
	dentest.Eventually(t, time.Minute, "den devdb's start line", func() bool {
		return strings.Contains(stderr.String(), "asks for no credentials: every local user can connect to it")
	})
	den := listeningOf(t, cmd.Process.Pid)
	if len(den.tcp) != 1 || den.tcp[0] != port {
		t.Errorf("den devdb listens on TCP ports %v; want only the printed %d", den.tcp, port)
	}
	pidFile, err := os.ReadFile(filepath.Join(data, "postgresql", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pg, _ := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	postgres := listeningOf(t, pg)
	if len(postgres.tcp) != 0 {
		t.Errorf("PostgreSQL listens on TCP ports %v; want none", postgres.tcp)
	}
	if len(den.unix) != 1 || len(postgres.unix) != 1 {
		t.Fatalf("den devdb listens on unix sockets %q and PostgreSQL on %q; want one each (FerretDB's, PostgreSQL's)", den.unix, postgres.unix)
	}
	for _, s := range []struct {
		path string
		uid  int
	}{{den.unix[0], os.Geteuid()}, {postgres.unix[0], -1}} {
		fi, err := os.Stat(filepath.Dir(s.path))
		if err != nil {
			t.Fatal(err)
		}
		uid := int(fi.Sys().(*syscall.Stat_t).Uid)
		if fi.Mode().Perm() != 0o700 || (s.uid >= 0 && uid != s.uid) || uid == 65534 {
			t.Errorf("unix socket %s is in a directory of mode %v, uid %d; want 0700, den's (%d) or the cluster's", s.path, fi.Mode().Perm(), uid, s.uid)
		}
	}
}

// kill -9 of den dev's PostgreSQL: den dev has it back within 20 s, says
// so in its log, and a task added then runs. Red on main: every command
// failed until den dev was restarted, so the task never ran.
func TestDevRestartsItsPostgreSQL(t *testing.T) {
	t.Parallel()
	if _, err := devdb.FindPostgres(""); err != nil {
		t.Skipf("PostgreSQL is not installed: %v", err)
	}
	data := filepath.Join(t.TempDir(), "data")
	_, stdout, stderr := start(t, "dev", "--data", data, "--listen", "127.0.0.1:0", "--node", "dev", "--engine", "postgresql")
	client, err := mongo.Connect(options.Client().ApplyURI(devURI(t, stdout)))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	db := client.Database("disbatch")
	var q bson.M
	dentest.Eventually(t, time.Minute, "the demo queue", func() bool {
		return db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "name", Value: "demo"}}).Decode(&q) == nil
	})
	pidFile, err := os.ReadFile(filepath.Join(data, "postgresql", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pg, _ := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	if err := syscall.Kill(pg, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	dentest.Eventually(t, 20*time.Second, "den dev saying PostgreSQL is back", func() bool {
		return strings.Contains(stderr.String(), "PostgreSQL restarted")
	})
	var id bson.ObjectID
	dentest.Eventually(t, 20*time.Second, "a task added after the restart", func() bool {
		id = bson.NewObjectID()
		ctx, cancel := context.WithTimeout(dentest.Context(t), 5*time.Second)
		defer cancel()
		// den dev's PostgreSQL commits without waiting for the disk: a
		// crash loses the last fraction of a second of commits, as
		// documented, and the queue was made just before the kill. A
		// user whose queue was lost makes it again; so does the test.
		err := db.Collection("queues").FindOne(ctx, bson.D{{Key: "_id", Value: q["_id"]}}).Err()
		if errors.Is(err, mongo.ErrNoDocuments) {
			t.Logf("the demo queue, made just before the kill, was lost with its commit: made again")
			_, err = db.Collection("queues").InsertOne(ctx, q)
		}
		if err != nil {
			return false
		}
		_, err = db.Collection("tasks").InsertOne(ctx, bson.D{
			{Key: "_id", Value: id}, {Key: "queue", Value: q["_id"]}, {Key: "status", Value: -2}, {Key: "node", Value: -1},
			{Key: "parameters", Value: bson.D{{Key: "commands", Value: "a"}}},
			{Key: "ctime", Value: time.Now()}, {Key: "mtime", Value: time.Now()}, {Key: "stdout", Value: nil}, {Key: "stderr", Value: nil},
		})
		return err == nil
	})
	back := time.Since(killed)
	t.Logf("a task could be added %s after kill -9 of den dev's PostgreSQL", back.Round(time.Millisecond))
	if back > 20*time.Second {
		t.Errorf("den dev took %s to have its PostgreSQL back; want within 20 s", back)
	}
	dentest.WaitStatus(t, db, id, 1)
	if want := fmt.Sprintf("PostgreSQL (pid %d) exited (signal: killed); restarting it", pg); !strings.Contains(stderr.String(), want) {
		t.Errorf("den dev's log does not say %q", want)
	}
}
