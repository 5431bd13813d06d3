package cli

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/den-project/den/den/dentest"
)

// A configuration den cannot use stops every command that loads it at
// start, through the real binary: exit 2 (a bad value, as for any
// command line mistake) with the reason on stderr. On main,
// DEN_MONGO_URI=junk became the host junk, and den run retried for ever;
// command.allow: "/usr/bin/python3" in the file became a one-entry list.
// A URI's password never reaches the output.
func TestConfigRefusedAtStart(t *testing.T) {
	t.Parallel()
	bin, err := dentest.BuildDen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	allowString := file("allow.yaml", "mongo: {uri: \"mongodb://127.0.0.1:1/\"}\ncommand:\n  allow: \"/usr/bin/python3\"\n")
	queuesString := file("queues.yaml", "mongo: {uri: \"mongodb://127.0.0.1:1/\"}\nactivequeues: \"q1,q2\"\n")
	uriJunk := file("junk.yaml", "mongo:\n  uri: junk\n")
	const pw = "s3cret-pw"
	parseError := `error parsing uri: scheme must be "mongodb" or "mongodb+srv"`
	for _, tc := range []struct {
		name string
		env  string // DEN_MONGO_URI
		args []string
		want []string
	}{
		{"run junk", "junk", []string{"run", "--node", "n"}, []string{`DEN_MONGO_URI "junk"`, parseError}},
		{"web junk", "junk", []string{"web", "--listen", "127.0.0.1:0"}, []string{`DEN_MONGO_URI "junk"`, parseError}},
		{"dev junk", "junk", []string{"dev", "--data", filepath.Join(dir, "devdata"), "--listen", "127.0.0.1:0"}, []string{`DEN_MONGO_URI "junk"`, parseError}},
		{"queue list junk", "junk", []string{"queue", "list"}, []string{`DEN_MONGO_URI "junk"`, parseError}},
		{"status junk", "junk", []string{"status"}, []string{`DEN_MONGO_URI "junk"`, parseError}},
		{"config print junk", "junk", []string{"config", "print"}, []string{`DEN_MONGO_URI "junk"`, parseError}},
		{"run flag junk", "", []string{"run", "--mongo-uri", "junk"}, []string{`--mongo-uri "junk"`, parseError}},
		{"run file junk", "", []string{"run", "--config", uriJunk}, []string{uriJunk, `mongo.uri "junk"`, parseError}},
		{"run password port", "mongodb://den:" + pw + "@db1:99999/", []string{"run"}, []string{`DEN_MONGO_URI "mongodb://den:xxxxx@db1:99999/"`, "port must be in the range"}},
		{"web password escape", "mongodb://den:" + pw + "%zz@db1/", []string{"web"}, []string{"invalid password: invalid URL escape (a % not followed"}},
		{"run allow a string", "", []string{"run", "--config", allowString}, []string{allowString, `command.allow must be a list of strings, not "/usr/bin/python3" (a string): in the file a list is written [/usr/bin/python3]`}},
		{"dev activequeues a string", "", []string{"dev", "--data", filepath.Join(dir, "devdata"), "--listen", "127.0.0.1:0", "--config", queuesString}, []string{`activequeues must be a list of strings, not "q1,q2" (a string): in the file a list is written [q1, q2]`}},
		{"run no MongoDB", "", []string{"run"}, []string{"no MongoDB configured"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			env := []string{"HOME=" + t.TempDir(), "DEN_MONGO_URI=" + tc.env}
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "DEN_") || strings.HasPrefix(kv, "DEN_TEST_") {
					env = append(env, kv)
				}
			}
			cmd.Env = env
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			switch {
			case ctx.Err() != nil:
				t.Fatalf("den %s with DEN_MONGO_URI=%q still running after a minute, want it refused at start (exit 2)\nstderr:\n%s", strings.Join(tc.args, " "), tc.env, stderr.String())
			case !errors.As(err, &exit) || exit.ExitCode() != ExitUsage:
				t.Fatalf("den %s with DEN_MONGO_URI=%q: %v, want exit 2\nstderr:\n%s", strings.Join(tc.args, " "), tc.env, err, stderr.String())
			}
			for _, want := range tc.want {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("den %s: stderr does not say %q:\n%s", strings.Join(tc.args, " "), want, stderr.String())
				}
			}
			if out := stdout.String() + stderr.String(); strings.Contains(out, pw) || strings.Contains(out, "%zz") {
				t.Errorf("den %s: the password is in the output:\n%s", strings.Join(tc.args, " "), out)
			}
			if strings.Contains(stdout.String(), "mongodb://") {
				t.Errorf("den %s printed a URI on stdout (a database started?):\n%s", strings.Join(tc.args, " "), stdout.String())
			}
		})
	}
}
