package cli

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/dentest"
	// The built-in plugins, as cmd/den has them.
	_ "github.com/den-project/den/plugins/command"
	_ "github.com/den-project/den/plugins/demo"
)

func TestMain(m *testing.M) {
	// Every command counts the tasks afresh, as before the census: the
	// tests check counts right after they change them. The census's own
	// age is tested where it matters (TestCountsAgeSharedByCommands).
	os.Setenv("DEN_WEB_COUNTS_AGE", "0")
	dentest.Main(m, nil)
}

// result is what one in-process den command line did.
type result struct {
	stdout, stderr string
	code           int
}

// den runs a command line in-process through the cobra root, with stdin
// and captured stdout and stderr.
func denRun(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut strings.Builder
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return result{out.String(), errOut.String(), code}
}

// denDB runs a command line against db.
func denDB(t *testing.T, db *mongo.Database, stdin string, args ...string) result {
	t.Helper()
	return denRun(t, stdin, append(args, "--mongo-uri", dentest.URI(), "--database", db.Name())...)
}

// must fails the test unless the command exited with code.
func (r result) must(t *testing.T, code int, args ...string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("den %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, r.code, code, r.stdout, r.stderr)
	}
	return r
}

// decode decodes the command's JSON output into v.
func (r result) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, r.stdout)
	}
}

// queueDoc reads a queue document.
func queueDoc(t *testing.T, db *mongo.Database, id bson.ObjectID) bson.M {
	t.Helper()
	var q bson.M
	if err := db.Collection("queues").FindOne(dentest.Context(t), bson.D{{Key: "_id", Value: id}}).Decode(&q); err != nil {
		t.Fatalf("read queue %s: %v", id.Hex(), err)
	}
	return q
}

// counts returns a queue's count_todo and count_total.
func counts(t *testing.T, db *mongo.Database, id bson.ObjectID) (todo, total int64) {
	t.Helper()
	q := queueDoc(t, db, id)
	return asInt(q["count_todo"]), asInt(q["count_total"])
}

func asInt(v any) int64 {
	switch n := v.(type) {
	case int32:
		return int64(n)
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return -999
}

// setStatus sets fields of a task directly, as a node or runner would.
func setTask(t *testing.T, db *mongo.Database, id bson.ObjectID, set bson.D) {
	t.Helper()
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: set}})
}

// Exit codes scripts rely on: 2 for a wrong command line, 1 for an
// operational error, 0 for done.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	for _, tc := range []struct {
		name string
		args []string
		db   bool
		code int
		say  string
	}{
		{"unknown command", []string{"bogus"}, false, ExitUsage, "unknown command"},
		{"unknown flag", []string{"queue", "list", "--bogus"}, true, ExitUsage, "unknown flag"},
		{"missing argument", []string{"task", "show"}, true, ExitUsage, "accepts 1 arg"},
		{"bad task id", []string{"task", "show", "xyz"}, true, ExitUsage, "not a 24-digit hex ObjectId"},
		{"no MongoDB", []string{"queue", "list", "--database", "x"}, false, ExitUsage, "no MongoDB configured"},
		{"unreachable MongoDB", []string{"queue", "list", "--mongo-uri", "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=200"}, false, ExitError, "cannot reach MongoDB"},
		{"no such task", []string{"task", "show", bson.NewObjectID().Hex()}, true, ExitError, "no task"},
		{"no such queue", []string{"queue", "show", "nope"}, true, ExitError, "no such queue"},
		{"fine", []string{"queue", "list"}, true, ExitOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r result
			if tc.db {
				r = denDB(t, db, "", tc.args...)
			} else {
				r = denRun(t, "", tc.args...)
			}
			r.must(t, tc.code, tc.args...)
			if !strings.Contains(r.stderr, tc.say) {
				t.Errorf("stderr %q does not say %q", r.stderr, tc.say)
			}
		})
	}
}

// Every command of the tree refuses what it does not know with exit 2:
// a group an unknown word (with the group's usage on stderr, nothing on
// stdout), every command an unknown flag, and every command that takes a
// fixed number of arguments one too many. A group given no word prints its
// help and exits 0.
func TestEveryCommandRefusesWhatItDoesNotKnow(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command, path []string)
	commands := 0
	walk = func(c *cobra.Command, path []string) {
		commands++
		t.Run(strings.Join(append([]string{"den"}, path...), " "), func(t *testing.T) {
			args := func(more ...string) []string { return append(slices.Clone(path), more...) }
			r := denRun(t, "", args("--no-such-flag")...).must(t, ExitUsage, args("--no-such-flag")...)
			if !strings.Contains(r.stderr, "unknown flag") {
				t.Errorf("stderr does not name the unknown flag: %q", r.stderr)
			}
			switch {
			case c.HasSubCommands():
				r := denRun(t, "", args("no-such-word")...).must(t, ExitUsage, args("no-such-word")...)
				if !strings.Contains(r.stderr, `unknown command "no-such-word"`) || !strings.Contains(r.stderr, "Usage:\n  "+c.CommandPath()) || r.stdout != "" {
					t.Errorf("an unknown word: want the error and %s's usage on stderr, nothing on stdout; got stdout %q, stderr %q", c.CommandPath(), r.stdout, r.stderr)
				}
				r = denRun(t, "", path...).must(t, ExitOK, path...)
				if !strings.Contains(r.stdout, "Usage:") {
					t.Errorf("no word: want the help on stdout, got %q", r.stdout)
				}
			case strings.Contains(c.Use, "..."):
				// Takes any number of arguments (den task cancel ID...).
			default:
				extra := args(slices.Repeat([]string{"extra"}, 8)...)
				denRun(t, "", extra...).must(t, ExitUsage, extra...)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub, append(slices.Clone(path), sub.Name()))
		}
	}
	walk(newRootCmd(), nil)
	if commands < 25 {
		t.Fatalf("walked %d commands; the tree has more", commands)
	}
}
