package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// den dev --command's policy: on, a few harmless programs that start no
// others, no shell, as nobody where den may change user; and valid.
func TestDevCommandPolicy(t *testing.T) {
	t.Parallel()
	p := devCommandPolicy(command.Policy{TmpMB: command.DefaultTmpMB, MemoryMB: command.DefaultMemoryMB, CPU: command.DefaultCPU, Shell: true, Allow: []string{"/bin/sh"}})
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if !p.Enabled || p.Shell || len(p.Allow) == 0 || p.User != devCommandUser || !p.UserOptional || p.TmpMB != command.DefaultTmpMB || p.MemoryMB != command.DefaultMemoryMB || p.CPU != command.DefaultCPU {
		t.Errorf("policy %+v", p)
	}
	if e := exampleProgram(p.Allow); filepath.Base(e) != "echo" {
		t.Errorf("the example runs %q, want echo", e)
	}
	if e := exampleProgram([]string{"/usr/bin/"}); e != "/usr/bin/echo" {
		t.Errorf("the example of an allowed directory runs %q, want /usr/bin/echo", e)
	}
	for _, a := range p.Allow {
		if !slices.Contains(devCommandPrograms, filepath.Base(a)) || (filepath.Dir(a) != "/usr/bin" && filepath.Dir(a) != "/bin") {
			t.Errorf("allows %s", a)
		}
	}
}

// startLine runs bin with args until its "node starting" line and returns
// its plugins and plugins_off, with the process (killed at the test's end)
// and its stdout.
func startLine(t *testing.T, bin string, args ...string) (on, off []string, cmd *exec.Cmd, stdout *syncBuffer) {
	t.Helper()
	cmd = exec.Command(bin, args...)
	env := []string{"HOME=" + t.TempDir()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DEN_") || strings.HasPrefix(kv, "DEN_TEST_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var started struct {
		Plugins []string `json:"plugins"`
		Off     []string `json:"plugins_off"`
	}
	dentest.Eventually(t, 3*time.Minute, "the node starting", func() bool {
		for _, line := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(line, `"node starting"`) {
				return json.Unmarshal([]byte(line), &started) == nil
			}
		}
		return false
	})
	return started.Plugins, started.Off, cmd, stdout
}

// The node's start line lists the plugins it runs tasks with: the command
// plugin only when it is on (before, every registered plugin). den dev
// --command turns it on with its policy, makes a queue "command", and runs
// a task of an allowed program there; a program it does not allow is
// refused, once.
func TestDevCommand(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts den run and den dev (the embedded database): not in -short")
	}
	bin, err := dentest.BuildDen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	on, off, _, _ := startLine(t, bin, "run", "--mongo-uri", dentest.URI(), "--database", dentest.DB(t).Name(), "--node", "off", "--log-format", "json")
	if slices.Contains(on, command.Name) || !slices.Contains(on, demo.Name) || !slices.Contains(off, command.Name) {
		t.Errorf("den run without command.enabled starts with plugins %v, off %v; want %s off", on, off, command.Name)
	}

	const database = "devcmd"
	on, _, dev, stdout := startLine(t, bin, "dev", "--data", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0", "--database", database,
		"--command", "--log-format", "json")
	if !slices.Contains(on, command.Name) {
		t.Errorf("den dev --command starts with plugins %v, want %s on", on, command.Name)
	}
	var uri string
	dentest.Eventually(t, time.Minute, "den dev's banner", func() bool {
		m := regexp.MustCompile(`at (mongodb://\S+) `).FindStringSubmatch(stdout.String())
		if m != nil {
			uri = m[1]
		}
		return m != nil && strings.Contains(stdout.String(), "the command plugin is on")
	})
	if !strings.Contains(stdout.String(), "den task add command") {
		t.Errorf("den dev --command does not say how to try it:\n%s", stdout)
	}
	add := exec.Command(bin, "task", "add", "command", "--mongo-uri", uri, "--database", database, "--json")
	echo := exampleProgram(devCommandPolicy(command.Policy{}).Allow) // as the banner says
	if echo == "" || !strings.Contains(stdout.String(), `["`+echo+`", "hello from a command task"]`) {
		t.Errorf("den dev --command's example is not a task of %q:\n%s", echo, stdout)
	}
	add.Stdin = strings.NewReader(`{"command": ["` + echo + `", "hello"]}` + "\n" + `{"command": ["/usr/bin/id"]}` + "\n")
	out, err := add.Output()
	if err != nil {
		t.Fatalf("den task add: %v\n%s", err, out)
	}
	var added struct{ IDs []string }
	if err := json.Unmarshal(out, &added); err != nil || len(added.IDs) != 2 {
		t.Fatalf("den task add --json: %s (%v)", out, err)
	}
	ids := added.IDs
	client, err := connect(uri, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(dentest.Context(t))
	db := client.Database(database)
	for i, want := range []struct {
		status  int64
		outcome string
		stdout  string
	}{{1, queue.OutcomeExitCode, "hello\n"}, {2, queue.OutcomeRefused, ""}} {
		id, _ := bson.ObjectIDFromHex(ids[i])
		var raw bson.Raw
		dentest.Eventually(t, 2*time.Minute, "task "+ids[i]+" ending", func() bool {
			raw = dentest.Task(t, db, id)
			st, _ := raw.Lookup("status").AsInt64OK()
			return st > 0
		})
		st, _ := raw.Lookup("status").AsInt64OK()
		o, _ := raw.Lookup("outcome").StringValueOK()
		so, _ := raw.Lookup("stdout").StringValueOK()
		if st != want.status || o != want.outcome || so != want.stdout {
			t.Errorf("task %d: status %d, outcome %q, stdout %q; want %d, %q, %q (%s)", i, st, o, so, want.status, want.outcome, want.stdout, raw)
		}
	}
	dev.Process.Signal(syscall.SIGINT)
}
