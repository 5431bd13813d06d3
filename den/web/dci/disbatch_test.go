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

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

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

// disbatchScript is what TestDisbatchCommand runs: every command of
// bin/disbatch (plugins, queues and its alias status, create-queue,
// update-queue, create-task, create-tasks and create-tasks --collection,
// delete-queue, search with --count, --options, --pretty and --noterse),
// with the errors it reports. want is what each printed against the Perl
// DCI (Disbatch::Web 4.000) and a Perl node (disbatchd 4.000) on the
// embedded database, seeded as seedForDisbatch seeds it; ID is an
// ObjectId, URL the API's address, HOST its host and port, TOKEN the
// password given; "[exit N]" ends the output of a command that failed.
// Where den prints otherwise by decision (docs/compatibility.md), perl
// is what the Perl DCI printed instead.
var disbatchScript = []struct {
	args []string
	want string
	perl string // "": den prints what the Perl DCI printed
}{
	{args: []string{"plugins"}, want: "Disbatch::Plugin::Demo\n"},
	// The Perl DCI has no authentication of its own (sites put a proxy
	// with basic auth in front) and took a write without credentials.
	{args: []string{"create-queue", "demo", "Disbatch::Plugin::Demo"},
		want: `Error posting URL/queues (401 Unauthorized): {"error":"writes need credentials: web.token as the basic-auth password (disbatch --username any --password TOKEN), or an Authorization: Bearer TOKEN header"}` + "\n[exit 2]\n",
		perl: "Created queue demo: ID\n"},
	{args: []string{"--username", "admin", "--password", "TOKEN", "create-queue", "demo", "Disbatch::Plugin::Demo"}, want: "HOST\tadmin\tTOKEN\nCreated queue demo: ID\n"},
	{args: []string{"--username", "admin", "--password", "TOKEN", "update-queue", "demo", "threads", "2"}, want: "HOST\tadmin\tTOKEN\nUpdated queue demo: {\"threads\":\"2\"}\n"},
	{args: []string{"--username", "admin", "--password", "TOKEN", "update-queue", "demo", "threads", "2"}, want: "HOST\tadmin\tTOKEN\nNo change to queue demo: {\"threads\":\"2\"}\n"},
	{args: []string{"--username", "admin", "--password", "TOKEN", "update-queue", "demo", "threads", "zero"},
		want: `Error posting URL/queues/demo (400 Bad Request): {"error":"threads must be a non-negative integer"}` + "\nHOST\tadmin\tTOKEN\n[exit 255]\n"},
	{args: []string{"--username", "admin", "--password", "TOKEN", "create-tasks", "demo", `[{"commands":"a"},{"commands":"ab"}]`}, want: "HOST\tadmin\tTOKEN\nCreated 2 tasks in queue demo\nID\nID\n"},
	{args: []string{"--username", "admin", "--password", "TOKEN", "create-task", "demo", "commands", "c"}, want: "HOST\tadmin\tTOKEN\nCreated 1 tasks in queue demo\nID\n"},
	{args: []string{"--username", "admin", "--password", "TOKEN", "create-tasks", "demo", `{}`},
		want: `Error posting URL/tasks/demo (400 Bad Request): {"error":"params must be a JSON array of task params objects"}` + "\nHOST\tadmin\tTOKEN\n[exit 255]\n"},
	{args: []string{"--username", "admin", "--password", "TOKEN", "create-tasks", "--collection", "users", "demo", `{"filter":{"migration":"foo"},"params":{"user":"document.username"}}`},
		want: "HOST\tadmin\tTOKEN\nCreated 2 tasks in queue demo\nID\nID\n"},
	{}, // the node runs the five tasks
	{args: []string{"queues"}, want: queuesTable},
	{args: []string{"status"}, want: queuesTable},
	// The five, less c (which fails: status 2), and the two seeded.
	{args: []string{"search", `{"status":1}`, "--count"}, want: "6 tasks\n"},
	{args: []string{"search", `{"params.commands":"c"}`, "--count"}, want: "1 tasks\n"},
	{args: []string{"search", `{"params.user":{"$exists":true}}`, "--options", `{"projection":{"_id":0,"params":1},"sort":{"params.user":1}}`},
		want: `[{"params":{"user":"ashley"}},{"params":{"user":"matt"}}]` + "\n"},
	{args: []string{"search", `{"params.user":"matt"}`, "--options", `{"projection":{"_id":0,"params":1}}`, "--pretty"},
		want: "[\n   {\n      \"params\" : {\n         \"user\" : \"matt\"\n      }\n   }\n]\n\n"},
	{args: []string{"search", `{"params.seeded":{"$exists":true}}`, "--options", `{"projection":{"_id":0,"stdout":1}}`},
		want: `[{"stdout":"[terse mode]"},{"stdout":{"$oid":"ID"}}]` + "\n"},
	{args: []string{"search", `{"params.seeded":{"$exists":true}}`, "--options", `{"projection":{"_id":0,"stdout":1}}`, "--noterse"},
		want: `[{"stdout":"hello\n"},{"stdout":"from gridfs\n"}]` + "\n"},
	{args: []string{"search", `{"params.commands":"c"}`, "--options", `{"limit":101}`},
		want: `Error posting URL/tasks/search (400 Bad Request): {"error":"limit cannot exceed 100"}` + "\n[exit 255]\n"},
	{args: []string{"search", `[]`},
		want: `Error posting URL/tasks/search (400 Bad Request): {"error":"filter and options must be name/value objects"}` + "\n[exit 255]\n"},
	{args: []string{"--username", "admin", "--password", "TOKEN", "delete-queue", "demo"}, want: "HOST\tadmin\tTOKEN\nDeleted queue demo\n"},
	// The Perl DCI wrote the stringified Perl object as the error.
	{args: []string{"--username", "admin", "--password", "TOKEN", "delete-queue", "demo"},
		want: `Error deleting URL/queues/demo (400 Bad Request): {"MongoDB::DeleteResult":{"deleted_count":0,"write_errors":[],"write_concern_errors":[]},"error":"queue not found"}` + "\nHOST\tadmin\tTOKEN\n[exit 255]\n",
		perl: `Error deleting URL/queues/demo (400 Bad Request): {"error":"MongoDB::DeleteResult=HASH(0x555c6ef882d0)","MongoDB::DeleteResult":{"write_concern_errors":[],"write_errors":[],"deleted_count":0}}` + "\nHOST\tadmin\tTOKEN\n[exit 255]\n"},
	{args: []string{"queues"}, want: "ID | Plugin | Name | Threads | Queued | Running | Completed | \n---+--------+------+---------+--------+---------+-----------+-\n\n0 total queues.\n"},
}

// queuesTable is what disbatch queues and status print once the node ran
// the five tasks.
const queuesTable = "ID                       | Plugin                 | Name | Threads | Queued | Running | Completed | \n" +
	"-------------------------+------------------------+------+---------+--------+---------+-----------+-\n" +
	"ID | Disbatch::Plugin::Demo | demo | 2       | 0      | 0       | 5         | \n\n1 total queues.\n"

// seedForDisbatch seeds what the script's commands read besides what
// they make: a users collection for create-tasks --collection, and two
// finished tasks of another queue, one with its stdout in the task and
// one with it in GridFS, for search's terse and --noterse.
func seedForDisbatch(t *testing.T, db *mongo.Database) {
	t.Helper()
	dentest.Insert(t, db.Collection("users"),
		bson.D{{Key: "username", Value: "ashley"}, {Key: "migration", Value: "foo"}},
		bson.D{{Key: "username", Value: "matt"}, {Key: "migration", Value: "foo"}},
		bson.D{{Key: "username", Value: "x"}, {Key: "migration", Value: "bar"}})
	id := func(h string) bson.ObjectID {
		o, err := bson.ObjectIDFromHex(h)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	file, other := id("bbbbbbbbbbbbbbbbbbbbbbb1"), id("ddddddddddddddddddddddd1")
	dentest.Insert(t, db.Collection("tasks.files"), bson.D{{Key: "_id", Value: file}, {Key: "filename", Value: "stdout"}, {Key: "length", Value: 12},
		{Key: "chunkSize", Value: 261120}, {Key: "uploadDate", Value: ts}, {Key: "metadata", Value: bson.D{{Key: "task_id", Value: id("ccccccccccccccccccccccc2")}}}})
	dentest.Insert(t, db.Collection("tasks.chunks"), bson.D{{Key: "files_id", Value: file}, {Key: "n", Value: 0},
		{Key: "data", Value: bson.Binary{Data: []byte("from gridfs\n")}}})
	task := func(hex, seeded string, stdout any) bson.D {
		return bson.D{{Key: "_id", Value: id(hex)}, {Key: "queue", Value: other}, {Key: "status", Value: 1}, {Key: "node", Value: "old"},
			{Key: "params", Value: bson.D{{Key: "seeded", Value: seeded}}}, {Key: "ctime", Value: ts}, {Key: "mtime", Value: ts},
			{Key: "stdout", Value: stdout}, {Key: "stderr", Value: ""}}
	}
	dentest.Insert(t, db.Collection("tasks"), task("ccccccccccccccccccccccc1", "inline", "hello\n"), task("ccccccccccccccccccccccc2", "gridfs", file))
}

// TestDisbatchCommand runs Disbatch's own client, bin/disbatch, against
// den's API with a den node as the only node, through every command it
// has (disbatchScript): it lists den's plugins (the node's: none is
// configured), is refused a write without credentials, creates a queue
// with them, sets its threads, posts tasks (a list, one, and one per
// document of another collection) that den runs, shows the queue with
// its counts, searches and counts tasks, and deletes the queue, each
// printing what it printed against the Perl DCI. It needs DISBATCH_SRC
// and the Perl modules bin/disbatch loads, and skips saying which is
// missing; CI has neither the checkout nor a way to get one offline.
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
	seedForDisbatch(t, db)
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
				return dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "status", Value: bson.D{{Key: "$gte", Value: 1}}},
					{Key: "params.seeded", Value: bson.D{{Key: "$exists", Value: false}}}}) == 5
			})
			continue
		}
		args := make([]string, len(step.args))
		for i, a := range step.args {
			args[i] = strings.ReplaceAll(a, "TOKEN", testToken)
		}
		got := disbatch(args...)
		switch {
		case got != step.want && step.perl == "":
			t.Errorf("disbatch %s printed:\n%s\nwant (as against the Perl DCI):\n%s", strings.Join(step.args, " "), got, step.want)
		case got != step.want:
			t.Errorf("disbatch %s printed:\n%s\nwant (by decision; the Perl DCI printed %q):\n%s", strings.Join(step.args, " "), got, step.perl, step.want)
		}
	}
}
