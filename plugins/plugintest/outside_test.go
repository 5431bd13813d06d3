package plugintest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/plugintest"
)

// outside is the plugin module that lives outside den's (its go.mod
// requires den with a replace directive pointing at this checkout).
const outside = "../../testdata/outside-plugin"

// A plugin module outside den's builds a den of its own from a few-line
// main.go (cli.Main), its tests (the README's Example) pass, and that den
// runs a task of its plugin end to end: queue created and task added with
// its CLI, claimed by its node, run by its task runner, status 1 recorded.
func TestOutsidePluginModule(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH: cannot build the outside plugin module")
	}
	ctx, cancel := context.WithDeadline(context.Background(), dentest.Deadline())
	defer cancel()
	bin := filepath.Join(t.TempDir(), "myden")
	gocmd := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, goTool, args...)
		cmd.Dir = outside
		// The module is built as its author would: its own go.mod and
		// go.sum (which must be complete), no workspace.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), outside, err, out)
		}
	}
	gocmd("build", "-o", bin, ".")
	gocmd("test", "./...")

	srv := plugintest.New(t)
	conn := []string{"--mongo-uri", srv.URI(), "--database", srv.DB().Name()}
	den := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append(args, conn...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("myden %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	den("", "queue", "create", "greet", "--plugin", "MyCorp::Plugin::Greet", "--maxthreads", "1")
	den(`{"name": "Ada"}`+"\n", "task", "add", "greet")

	// The node's configuration file gives the plugin its own section,
	// which must reach the plugin in the live node's runners.
	config := filepath.Join(t.TempDir(), "den.yaml")
	if err := os.WriteFile(config, []byte("plugins:\n  MyCorp::Plugin::Greet:\n    greeting: Welcome\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	node := exec.Command(bin, append([]string{"run", "--config", config, "--node", "outside", "--interval", "200ms"}, conn...)...)
	var logs strings.Builder
	node.Stdout, node.Stderr = &logs, &logs
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		node.Process.Signal(syscall.SIGTERM)
		node.Wait()
		if t.Failed() {
			t.Logf("node's log:\n%s", logs.String())
		}
	}()

	var task struct {
		Status  int    `bson:"status"`
		Stdout  string `bson:"stdout"`
		Greeted string `bson:"greeted"`
	}
	for {
		err := srv.DB().Collection("tasks").FindOne(ctx, bson.D{}).Decode(&task)
		if err == nil && task.Status > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the task did not finish (last status %d, read error %v)", task.Status, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if task.Status != 1 || task.Stdout != "Welcome, Ada!\n" || task.Greeted != "Ada" {
		t.Errorf("task finished with status %d, stdout %q, greeted %q; want 1, \"Welcome, Ada!\\n\" (the greeting of the plugin's config section), Ada", task.Status, task.Stdout, task.Greeted)
	}
}
