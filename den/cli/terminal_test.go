package cli

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins/demo"
)

// What an attacker with insert rights on the database, or a task's
// program, writes where den prints it: a queue name that retitles the
// terminal, a node name that clears the screen, a plugin name with a C1
// CSI, a stderr that clears the screen and homes the cursor, parameters
// with a bidi override, a tab and a newline (which would break a table);
// output in GridFS with bytes that are not UTF-8.
const (
	hostileQueue  = "q\x1b]0;pwned\x07"
	hostileNode   = "n\x1b[2J\tx\ny"
	hostilePlugin = "Disbatch::Plugin::\u009b31mRed"
	hostileStderr = "\x1b[2J\x1b[H"
	hostileStdout = "line1\x1b]0;pwned\x07\r\nline2\tcol\u009b2J\u202eevil\n"
	// Output in GridFS is bytes: some not UTF-8, a character cut at the end.
	hostileFile = hostileStdout + "bin\xff\xe2\x80"
	// Their escaped forms, as den prints them.
	shownQueue  = `q\x1b]0;pwned\a`
	shownNode   = `n\x1b[2J\tx\ny`
	shownPlugin = `Disbatch::Plugin::\u009b31mRed`
	shownStderr = `\x1b[2J\x1b[H`
	shownStdout = "line1\\x1b]0;pwned\\a\r\nline2\tcol\\u009b2J\\u202eevil\n"
	shownFile   = shownStdout + `bin\xff\xe2\x80`
)

// terminalSafe fails the test if out holds anything a terminal acts on:
// C0 controls but newline and tab (and "\r\n" in a task's output), DEL,
// C1 characters, bytes that are not UTF-8 (an 8-bit terminal takes 0x9b
// for CSI), bidirectional formatting characters.
func terminalSafe(t *testing.T, what, out string, lines bool) {
	t.Helper()
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRuneInString(out[i:])
		bad := false
		switch {
		case r == utf8.RuneError && n == 1:
			bad = true
		case r == '\n', r == '\t' && lines, r == '\r' && lines && strings.HasPrefix(out[i+1:], "\n"):
		case r < 0x20, r >= 0x7f && r <= 0x9f:
			bad = true
		case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
			bad = true
		}
		if bad {
			t.Errorf("%s: byte %d is %q, which a terminal acts on:\n%q", what, i, out[i:i+n], out)
			return
		}
		i += n
	}
}

// terminalDB seeds a database with hostile names and output: a queue and
// a plugin name, a node, a failed task with hostile parameters, stderr and
// stdout, and a malformed queue whose _id is a hostile string.
func terminalDB(t *testing.T) (db *mongo.Database, qid, task, inGridFS bson.ObjectID) {
	t.Helper()
	db = dentest.DB(t)
	qid = dentest.Queue(t, db, hostileQueue, demo.Name, 1, "fifo")
	dentest.Queue(t, db, "other", hostilePlugin, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{{Key: "k\x1b[1m", Value: "v\u202e\x1b[31m"}}, bson.D{{Key: "i", Value: 2}})
	task = ids[0]
	setTask(t, db, task, bson.D{{Key: "status", Value: 2}, {Key: "node", Value: hostileNode}, {Key: "stderr", Value: hostileStderr},
		{Key: "stdout", Value: hostileStdout}, {Key: "outcome", Value: "exit_code"}, {Key: "mtime", Value: time.Now()}})
	// Stored in chunks of 4 bytes: characters and "\r\n" split between chunks.
	inGridFS = ids[1]
	file, err := gridfs.NewBucket(db, "tasks").WithChunkSize(4).Put(dentest.Context(t), "stderr", bson.D{{Key: "task_id", Value: inGridFS}}, []byte(hostileFile))
	if err != nil {
		t.Fatal(err)
	}
	setTask(t, db, inGridFS, bson.D{{Key: "status", Value: 0}, {Key: "node", Value: hostileNode}, {Key: "stderr", Value: file}})
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: -1}}}})
	dentest.Insert(t, db.Collection("nodes"), bson.D{{Key: "node", Value: hostileNode}, {Key: "timestamp", Value: time.Now()}, {Key: "version", Value: "v\x07\u009d"}})
	dentest.Insert(t, db.Collection("queues"), bson.D{{Key: "_id", Value: "bad\x1b[2J"}, {Key: "name", Value: 7}})
	return db, qid, task, inGridFS
}

// Every command that prints names, reasons or a task's output prints them
// escaped: no ESC, BEL, C1 character, bidi override or stray byte reaches
// the terminal, whether as a table, as text or as JSON, on stdout or on
// stderr; the escaped form is shown where the value is. den output keeps
// the output's lines and tabs.
func TestTerminalEscapes(t *testing.T) {
	t.Parallel()
	db, qid, task, inGridFS := terminalDB(t)
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		want  []string // in stdout and stderr together
		lines bool     // a task's output: tabs and "\r\n" stay as they are
	}{
		{"status", []string{"status"}, ExitOK, []string{shownQueue, shownNode, shownPlugin, shownStderr, `bad\u001b[2J`}, false},
		{"task list", []string{"task", "list"}, ExitOK, []string{shownQueue, shownNode, `{"k\u001b[1m":"v\u202e\u001b[31m"}`}, false},
		{"task show", []string{"task", "show", task.Hex()}, ExitOK, []string{`k\x1b[1m: "v\u202e\x1b[31m"`, shownNode}, false},
		{"queue list", []string{"queue", "list"}, ExitOK, []string{shownQueue, shownPlugin, `bad\u001b[2J`}, false},
		{"queue show", []string{"queue", "show", qid.Hex()}, ExitOK, []string{`name: "` + shownQueue + `"`}, false},
		{"node list", []string{"node", "list"}, ExitOK, []string{shownNode, shownQueue + ":1", `v\a\u009d`}, false},
		{"counts check", []string{"counts", "check"}, ExitOK, []string{shownQueue}, false},
		{"task add", []string{"task", "add", qid.Hex()}, ExitOK, []string{"to queue " + shownQueue}, false},
		{"queue set", []string{"queue", "set", qid.Hex(), "maxthreads=2"}, ExitOK, []string{"updated queue " + shownQueue}, false},
		{"queue delete refused", []string{"queue", "delete", qid.Hex()}, ExitError, []string{"queue " + shownQueue}, false},
		{"node set", []string{"node", "set", hostileNode, "maxthreads", "3"}, ExitOK, []string{"node " + shownNode}, false},
		{"output stderr", []string{"output", task.Hex(), "--stderr"}, ExitOK, []string{shownStderr}, true},
		{"output stdout", []string{"output", task.Hex()}, ExitOK, []string{shownStdout}, true},
		{"output follow", []string{"output", task.Hex(), "--follow"}, ExitOK, []string{shownStdout}, true},
		{"output from GridFS", []string{"output", inGridFS.Hex(), "--stderr"}, ExitOK, []string{shownFile}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdin := ""
			if tc.name == "task add" {
				stdin = "{}\n"
			}
			r := denDB(t, db, stdin, tc.args...).must(t, tc.code, tc.args...)
			terminalSafe(t, "stdout", r.stdout, tc.lines)
			terminalSafe(t, "stderr", r.stderr, false)
			for _, w := range tc.want {
				if !strings.Contains(r.stdout+r.stderr, w) {
					t.Errorf("den %v does not show %q:\nstdout:\n%s\nstderr:\n%s", tc.args, w, r.stdout, r.stderr)
				}
			}
		})
	}
}

// With --json, the names and output are the stored values exactly once
// decoded, and the JSON text itself holds nothing a terminal acts on
// (DEL, C1 and bidi characters, which JSON encoders leave raw, are \u
// escapes).
func TestTerminalJSON(t *testing.T) {
	t.Parallel()
	db, _, task, _ := terminalDB(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string // strings the decoded JSON holds
	}{
		{"status", []string{"status"}, []string{hostileQueue, hostileNode, hostilePlugin}},
		{"task list", []string{"task", "list"}, []string{hostileQueue, hostileNode, "k\x1b[1m", "v\u202e\x1b[31m"}},
		{"task show", []string{"task", "show", task.Hex()}, []string{hostileStderr, hostileNode, "v\u202e\x1b[31m"}},
		{"queue list", []string{"queue", "list"}, []string{hostileQueue, hostilePlugin}},
		{"node list", []string{"node", "list"}, []string{hostileNode, hostileQueue, "v\x07\u009d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tc.args, "--json")
			r := denDB(t, db, "", args...).must(t, ExitOK, args...)
			terminalSafe(t, "stdout", r.stdout, false)
			var v any
			r.decode(t, &v)
			got := map[string]bool{}
			collect(v, got)
			for _, w := range tc.want {
				if !got[w] {
					t.Errorf("den %v: no string %q in the decoded JSON:\n%s", args, w, r.stdout)
				}
			}
		})
	}
}

// collect gathers every string (and map key) in a decoded JSON value.
func collect(v any, into map[string]bool) {
	switch x := v.(type) {
	case string:
		into[x] = true
	case []any:
		for _, e := range x {
			collect(e, into)
		}
	case map[string]any:
		for k, e := range x {
			into[k] = true
			collect(e, into)
		}
	case json.Number, float64, bool, nil:
	default:
		panic(fmt.Sprintf("unexpected %T", v))
	}
}

// den output --raw prints the exact bytes stored, control characters and
// all, inline or from GridFS, with and without --follow.
func TestOutputRaw(t *testing.T) {
	t.Parallel()
	db, _, task, inGridFS := terminalDB(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"output", task.Hex(), "--stderr", "--raw"}, hostileStderr},
		{[]string{"output", task.Hex(), "--raw"}, hostileStdout},
		{[]string{"output", task.Hex(), "--raw", "--follow"}, hostileStdout},
		{[]string{"output", inGridFS.Hex(), "--stderr", "--raw"}, hostileFile},
	} {
		if r := denDB(t, db, "", tc.args...).must(t, ExitOK, tc.args...); r.stdout != tc.want {
			t.Errorf("den %v printed %q, want %q", tc.args, r.stdout, tc.want)
		}
	}
}

// A node logs the names of the queues it skips, from the database: in
// either log format, nothing a terminal acts on reaches its stderr, and
// the JSON lines decode to the stored names.
func TestNodeLogsEscaped(t *testing.T) {
	t.Parallel()
	bin, err := dentest.BuildDen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db := dentest.DB(t)
	dentest.Queue(t, db, hostileQueue, hostilePlugin, 1, "fifo")
	for _, format := range []string{"console", "json"} {
		t.Run(format, func(t *testing.T) {
			var errOut syncBuffer
			cmd := exec.Command(bin, "run", "--mongo-uri", dentest.URI(), "--database", db.Name(), "--node", "logs-"+format, "--log-format", format)
			cmd.Stdout, cmd.Stderr = &errOut, &errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer func() {
				cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(time.Minute):
					cmd.Process.Kill()
					<-exited
				}
			}()
			dentest.Eventually(t, 2*time.Minute, "the node logs the queue it skips", func() bool {
				return strings.Contains(errOut.String(), "queue skipped: no plugin")
			})
			out := errOut.String()
			terminalSafe(t, "the node's log", out, true)
			if format == "console" {
				for _, w := range []string{`q\u001b]0;pwned\u0007`, `Disbatch::Plugin::\u009b31mRed`} {
					if !strings.Contains(out, w) {
						t.Errorf("the log does not show %q:\n%s", w, out)
					}
				}
				return
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				var entry map[string]any
				if err := json.Unmarshal([]byte(line), &entry); err != nil {
					t.Fatalf("log line %q is not JSON: %v", line, err)
				}
				if strings.HasPrefix(fmt.Sprint(entry["msg"]), "queue skipped: no plugin") {
					if entry["queue"] != hostileQueue || entry["plugin"] != hostilePlugin {
						t.Errorf("logged queue %q, plugin %q; want %q, %q", entry["queue"], entry["plugin"], hostileQueue, hostilePlugin)
					}
					return
				}
			}
			t.Errorf("no JSON entry for the skipped queue:\n%s", out)
		})
	}
}
