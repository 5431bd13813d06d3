package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func write(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestShippedExamplesLoad(t *testing.T) {
	c, err := Load("../../testdata/den.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MongoURI != "mongodb://127.0.0.1:27017/" || c.Database != "disbatch" || c.Interval != time.Second || c.OrphanAge != 5*time.Minute || c.GFS != "auto" {
		t.Fatalf("den.yaml: %+v", c)
	}

	c, err = Load("../../testdata/disbatch-config.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Database != "disbatch" || c.GFS != "auto" || len(c.ActiveQueues) != 1 || c.ActiveQueues[0] != "571f8951b75bf335634ec271" {
		t.Fatalf("disbatch config: %+v", c)
	}
	if !strings.Contains(c.MongoURI, "disbatchd:s3cret@127.0.0.1:27017") || !strings.Contains(c.MongoURI, "authSource=disbatch") {
		t.Errorf("node URI %s", c.MongoURI)
	}
	if !strings.Contains(c.RunnerURI, "task_runner:runner-pw@") {
		t.Errorf("runner URI %s", c.RunnerURI)
	}
}

func TestPrecedence(t *testing.T) {
	file := write(t, "den.yaml", "mongo:\n  uri: mongodb://file:1/\n  database: fromfile\nnode: filenode\ngfs: false\n")
	t.Setenv("DEN_MONGO_URI", "mongodb://env:2/")
	t.Setenv("DEN_DATABASE", "fromenv")
	t.Setenv("DEN_NODE", "envnode")
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	AddFlags(fs)
	if err := fs.Parse([]string{"--config", file, "--node", "flagnode"}); err != nil {
		t.Fatal(err)
	}
	c, err := Load("", fs)
	if err != nil {
		t.Fatal(err)
	}
	if c.MongoURI != "mongodb://env:2/" || c.Database != "fromenv" || c.Node != "flagnode" || c.GFS != "false" {
		t.Fatalf("got %+v", c)
	}
}

func TestErrorsNameTheFileAndProblem(t *testing.T) {
	cases := []struct {
		name, file, body, want string
	}{
		{"yaml syntax", "den.yaml", "mongo: [unclosed\n", "den.yaml"},
		{"unknown yaml key", "den.yaml", "mongo:\n  url: x\n", "unknown keys mongo.url"},
		{"bad gfs", "den.yaml", "gfs: sometimes\n", "gfs must be true, false"},
		{"bad interval", "den.yaml", "interval: soon\n", "interval \"soon\""},
		{"bad log level", "den.yaml", "log:\n  level: loud\n", "log.level"},
		{"json syntax", "config.json", "{\n  \"mongohost\": \"x\",\n  \"database\" \"d\"\n}\n", "line 3, column"},
		{"json without mongohost", "config.json", "{\"database\": \"d\"}", "mongohost must be a string"},
		{"json activequeues not a list", "config.json", "{\"mongohost\": \"h\", \"database\": \"d\", \"activequeues\": \"q\"}", "activequeues must be an array"},
		{"bad uri", "den.yaml", "mongo:\n  uri: http://x/\n", "not a mongodb:// URI"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, tc.file, tc.body)
			_, err := Load(path, nil)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q should name %s and say %q", err, path, tc.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), nil); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestDisbatchKeysDenDoesNotKnowAreWarnings(t *testing.T) {
	path := write(t, "config.json", `{"mongohost": "db:27017", "database": "d", "my_plugin_setting": 1,}`)
	c, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MongoURI != "mongodb://db:27017/" {
		t.Errorf("uri %s", c.MongoURI)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "my_plugin_setting") {
		t.Fatalf("warnings %v", c.Warnings)
	}
}

func TestRelaxJSON(t *testing.T) {
	cases := map[string]string{
		`{"a": 1,}`:                   `{"a": 1 }`,
		"{\"a\": [1, 2, ], # note\n}": "{\"a\": [1, 2  ]        \n}",
		`{"u": "mongodb://h/#x,"}`:    `{"u": "mongodb://h/#x,"}`,
		`{"s": "a \" # , ]"}`:         `{"s": "a \" # , ]"}`,
		"{\"a\": 1, // c\n \"b\": 2}": "{\"a\": 1,     \n \"b\": 2}",
	}
	for in, want := range cases {
		if got := string(relaxJSON([]byte(in))); got != want {
			t.Errorf("relaxJSON(%q) = %q, want %q", in, got, want)
		}
	}
}

// The task_runner user of a Disbatch file is not grafted onto a URI given
// in the environment.
func TestRunnerUserOnlyForTheFilesURI(t *testing.T) {
	t.Setenv("DEN_MONGO_URI", "mongodb://other:27017/")
	c, err := Load("../../testdata/disbatch-config.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MongoURI != "mongodb://other:27017/" || c.RunnerURI != c.MongoURI {
		t.Fatalf("node %s runner %s", c.MongoURI, c.RunnerURI)
	}
}
