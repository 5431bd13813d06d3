package dci_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/dentest/nodetest"
	"github.com/den-project/den/den/web/dci"
)

// EnvDisbatchSrc names a Disbatch 4 checkout (mbusigin/disbatch at v4.000)
// for TestDisbatchCommand, which runs its bin/disbatch; as
// scripts/perl-compare.sh takes it.
const EnvDisbatchSrc = "DISBATCH_SRC"

// disbatchModules are the Perl modules bin/disbatch loads, with the
// Debian package of each.
var disbatchModules = [][2]string{
	{"LWP::UserAgent", "libwww-perl"}, {"Text::CSV_XS", "libtext-csv-xs-perl"}, {"Text::Table", "libtext-table-perl"},
	{"IO::Wrap", "libio-stringy-perl"}, {"Cpanel::JSON::XS", "libcpanel-json-xs-perl"}, {"File::Slurp", "libfile-slurp-perl"},
	{"Try::Tiny", "libtry-tiny-perl"},
}

// disbatchScript is what TestDisbatchCommand runs, and what each command
// printed against the Perl DCI (Disbatch::Web 4.000) and a Perl node
// (disbatchd 4.000) on the embedded database: ID is an ObjectId, URL the
// API's address, TOKEN the password given. The one difference is the
// write without credentials: the Perl DCI has no authentication of its
// own (sites put a proxy with basic auth in front), and took it; den
// refuses it with 401 (docs/compatibility.md).
var disbatchScript = []struct {
	args []string
	want string
}{
	{[]string{"plugins"}, "Disbatch::Plugin::Demo\n"},
	{[]string{"create-queue", "demo", "Disbatch::Plugin::Demo"},
		`Error posting URL/queues (401 Unauthorized): {"error":"writes need credentials: web.token as the basic-auth password (disbatch --username any --password TOKEN), or an Authorization: Bearer TOKEN header"}` + "\n[exit 2]\n"},
	{[]string{"--username", "admin", "--password", "TOKEN", "create-queue", "demo", "Disbatch::Plugin::Demo"}, "HOST\tadmin\tTOKEN\nCreated queue demo: ID\n"},
	{[]string{"--username", "admin", "--password", "TOKEN", "update-queue", "demo", "threads", "2"}, "HOST\tadmin\tTOKEN\nUpdated queue demo: {\"threads\":\"2\"}\n"},
	{[]string{"--username", "admin", "--password", "TOKEN", "create-tasks", "demo", `[{"commands":"a"},{"commands":"ab"}]`}, "HOST\tadmin\tTOKEN\nCreated 2 tasks in queue demo\nID\nID\n"},
	{[]string{"--username", "admin", "--password", "TOKEN", "create-task", "demo", "commands", "c"}, "HOST\tadmin\tTOKEN\nCreated 1 tasks in queue demo\nID\n"},
	{nil, ""}, // den runs the three tasks
	{[]string{"queues"}, "ID                       | Plugin                 | Name | Threads | Queued | Running | Completed | \n" +
		"-------------------------+------------------------+------+---------+--------+---------+-----------+-\n" +
		"ID | Disbatch::Plugin::Demo | demo | 2       | 0      | 0       | 3         | \n\n1 total queues.\n"},
	{[]string{"search", `{"status":1}`, "--count"}, "2 tasks\n"},
	{[]string{"search", `{"params.commands":"c"}`, "--count"}, "1 tasks\n"},
	{[]string{"--username", "admin", "--password", "TOKEN", "delete-queue", "demo"}, "HOST\tadmin\tTOKEN\nDeleted queue demo\n"},
	{[]string{"queues"}, "ID | Plugin | Name | Threads | Queued | Running | Completed | \n---+--------+------+---------+--------+---------+-----------+-\n\n0 total queues.\n"},
}

// TestDisbatchCommand runs Disbatch's own client, bin/disbatch, against
// den's API with a den node as the only node: it lists den's plugins
// (the node's: none is configured), is refused a write without
// credentials, creates a queue with them, sets its threads, posts tasks
// that den runs, shows the queue with its counts, counts tasks by a search
// and deletes the queue, each printing what it printed against the Perl
// DCI. It needs DISBATCH_SRC and the Perl modules bin/disbatch loads.
func TestDisbatchCommand(t *testing.T) {
	src := os.Getenv(EnvDisbatchSrc)
	if src == "" {
		t.Skip(EnvDisbatchSrc + " is not set: it must name a Disbatch 4 checkout (mbusigin/disbatch at v4.000) for its bin/disbatch")
	}
	script := filepath.Join(src, "bin", "disbatch")
	if _, err := os.Stat(script); err != nil {
		t.Skipf("%s=%s has no bin/disbatch: %v", EnvDisbatchSrc, src, err)
	}
	perl, err := exec.LookPath("perl")
	if err != nil {
		t.Skip("no perl: apt-get install perl")
	}
	var missing []string
	for _, m := range disbatchModules {
		if exec.Command(perl, "-e", "require "+m[0]).Run() != nil {
			missing = append(missing, m[0]+" (Debian: "+m[1]+")")
		}
	}
	if len(missing) > 0 {
		t.Skipf("Perl modules bin/disbatch needs are missing: %s", strings.Join(missing, ", "))
	}
	db := dentest.DB(t)
	// A node as den runs by default: the command plugin off, Demo on.
	nodetest.Start(t, db, "den1", func(c *den.Config) { c.PluginConfig = nil })
	srv := serve(t, db, testToken, func(o *dci.Options) { o.Plugins = nil })
	host := strings.TrimPrefix(srv.URL, "http://")
	// The node lists its plugins with its first heartbeat.
	dentest.Eventually(t, time.Minute, "the node's plugins", func() bool {
		return dentest.Count(t, db.Collection("nodes"), map[string]any{"plugins": "Disbatch::Plugin::Demo"}) == 1
	})
	ids := regexp.MustCompile(`\b[0-9a-f]{24}\b`)
	disbatch := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		full := append([]string{script, "--url", srv.URL, "--config", "/nonexistent"}, args...)
		cmd := exec.CommandContext(ctx, perl, full...)
		out, err := cmd.CombinedOutput()
		text := string(out)
		if err != nil {
			text += fmt.Sprintf("[exit %d]\n", cmd.ProcessState.ExitCode())
		}
		text = strings.ReplaceAll(text, testToken, "TOKEN")
		text = strings.ReplaceAll(text, srv.URL, "URL")
		text = strings.ReplaceAll(text, host, "HOST")
		return ids.ReplaceAllString(text, "ID")
	}
	for _, step := range disbatchScript {
		if step.args == nil {
			dentest.Eventually(t, 2*time.Minute, "den running the tasks", func() bool {
				return dentest.Count(t, db.Collection("tasks"), map[string]any{"status": map[string]any{"$gte": 1}}) == 3
			})
			continue
		}
		args := make([]string, len(step.args))
		for i, a := range step.args {
			args[i] = strings.ReplaceAll(a, "TOKEN", testToken)
		}
		if got := disbatch(args...); got != step.want {
			t.Errorf("disbatch %s printed:\n%s\nwant (as against the Perl DCI):\n%s", strings.Join(step.args, " "), got, step.want)
		}
	}
}
