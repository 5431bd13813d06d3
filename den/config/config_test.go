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
	if c.RunnerRelay {
		t.Error("runners of a Disbatch file with a task_runner user go through the node's relay by default; want them to keep their own user")
	}
}

// runner.max_tasks and runner.idle: defaults, values, and bad values
// named in the error.
func TestRunnerReuseKeys(t *testing.T) {
	for _, tc := range []struct {
		file     string
		maxTasks int64
		idle     time.Duration
		err      string
	}{
		{"node: n\n", 100, 10 * time.Second, ""},
		{"runner:\n  max_tasks: 1\n  idle: 2m\n", 1, 2 * time.Minute, ""},
		{"runner:\n  max_tasks: 0\n", 0, 0, "runner.max_tasks: 0 is below the minimum 1 (allowed: 1 to 100000 tasks)"},
		{"runner:\n  max_tasks: many\n", 0, 0, "runner.max_tasks many is not a whole number"},
		{"runner:\n  idle: -1s\n", 0, 0, "runner.idle: -1s is below the minimum 1s"},
	} {
		c, err := Load(write(t, "den.yaml", tc.file), nil)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one containing %q", tc.file, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.file, err)
		case tc.err == "" && (c.RunnerMaxTasks != tc.maxTasks || c.RunnerIdle != tc.idle):
			t.Errorf("%q: max_tasks %d, idle %s; want %d, %s", tc.file, c.RunnerMaxTasks, c.RunnerIdle, tc.maxTasks, tc.idle)
		}
	}
}

func TestRunnerRelay(t *testing.T) {
	if _, err := Load(write(t, "den.yaml", "runner:\n  relay: maybe\n"), nil); err == nil || !strings.Contains(err.Error(), "runner.relay must be true or false") {
		t.Errorf("runner.relay: maybe gave %v", err)
	}
	for _, tc := range []struct {
		file string
		env  string
		want bool
	}{
		{"mongo:\n  uri: mongodb://h/\n", "", true},
		{"mongo:\n  uri: mongodb://h/\nrunner:\n  relay: false\n", "", false},
		{"mongo:\n  uri: mongodb://h/\nrunner:\n  relay: true\n", "", true},
		{"mongo:\n  uri: mongodb://h/\n", "false", false},
	} {
		if tc.env != "" {
			t.Setenv("DEN_RUNNER_RELAY", tc.env)
		}
		c, err := Load(write(t, "den.yaml", tc.file), nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.RunnerRelay != tc.want {
			t.Errorf("file %q env %q: relay %v, want %v", tc.file, tc.env, c.RunnerRelay, tc.want)
		}
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
		{"command.enabled not a boolean", "den.yaml", "command:\n  enabled: \"yes\"\n", "command.enabled must be true or false"},
		{"command.allow not a list of strings", "den.yaml", "command:\n  allow: [1]\n", "command.allow must be a list of strings"},
		{"command.env_allow not a list", "den.yaml", "command:\n  env_allow: 5\n", "command.env_allow must be a list of strings"},
		{"command.landlock unknown", "den.yaml", "command:\n  landlock: sometimes\n", "command.landlock \"sometimes\" must be required or optional"},
		{"command.landlock not a string", "den.yaml", "command:\n  landlock: false\n", "command.landlock must be required or optional"},
		{"max_output not a number", "den.yaml", "max_output: lots\n", "max_output lots is not a whole number"},
		{"max_output zero", "den.yaml", "max_output: 0\n", "max_output: 0 is below the minimum 1024"},
		{"node a list", "den.yaml", "node: [a, b]\n", "node must be a single value"},
		{"command.enabled a sentence", "den.yaml", "command:\n  enabled: \"yes please\"\n", "command.enabled must be true or false"},
		{"database with a slash", "den.yaml", "mongo:\n  database: a/b\n", "database name \"a/b\" contains a character"},
		{"database with a dot", "den.yaml", "mongo:\n  database: bad.db\n", "database name \"bad.db\" contains a character"},
		{"database too long", "den.yaml", "mongo:\n  database: " + strings.Repeat("d", 64) + "\n", "at most 63"},
		{"activequeues a list of lists", "den.yaml", "activequeues: [[a]]\n", "activequeues must be a list of strings"},
		{"gfs a list", "den.yaml", "gfs: [true]\n", "gfs must be a single value"},
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

// The command plugin's keys and max_output, with their defaults, from the
// file and from the environment.
func TestCommandAndMaxOutputKeys(t *testing.T) {
	c, err := Load(write(t, "den.yaml", "mongo:\n  uri: mongodb://h/\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxOutput != 1<<30 || c.Command.Landlock != "required" || c.Command.Enabled || len(c.Command.EnvAllow) != 0 {
		t.Fatalf("defaults: max_output %d, command %+v", c.MaxOutput, c.Command)
	}
	file := write(t, "den.yaml", "mongo:\n  uri: mongodb://h/\nmax_output: 1048576\ncommand:\n  enabled: true\n  allow: [/usr/bin/]\n  env_allow: [LANG, LC_*]\n  landlock: optional\n")
	c, err = Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxOutput != 1<<20 || !c.Command.Enabled || c.Command.Landlock != "optional" || strings.Join(c.Command.EnvAllow, ",") != "LANG,LC_*" {
		t.Fatalf("file: max_output %d, command %+v", c.MaxOutput, c.Command)
	}
	t.Setenv("DEN_MAX_OUTPUT", "4096")
	t.Setenv("DEN_COMMAND_ENABLED", "false")
	t.Setenv("DEN_COMMAND_ENV_ALLOW", "MYAPP_")
	c, err = Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxOutput != 4096 || c.Command.Enabled || strings.Join(c.Command.EnvAllow, ",") != "MYAPP_" {
		t.Fatalf("environment: max_output %d, command %+v", c.MaxOutput, c.Command)
	}
}

// Each plugin's section of the plugins key reaches it as written (names
// and keys keep their case and dots), next to the command section; a
// section that is not a mapping is an error naming the plugin.
func TestPluginSections(t *testing.T) {
	path := write(t, "den.yaml", `
mongo:
  uri: mongodb://db:27017/
plugins:
  MyCorp::Plugin::Resize:
    Quality: 80
    sizes: [small, large]
    s3.bucket: photos
  Empty::Plugin:
command:
  enabled: false
`)
	c, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := c.PluginConfig()
	if want := `{"Quality":80,"s3.bucket":"photos","sizes":["small","large"]}`; string(got["MyCorp::Plugin::Resize"]) != want {
		t.Errorf("section %s, want %s", got["MyCorp::Plugin::Resize"], want)
	}
	if s, ok := got["Empty::Plugin"]; ok {
		t.Errorf("a plugin with no settings has a section: %s", s)
	}
	if !strings.Contains(string(got[CommandPlugin]), `"enabled":false`) {
		t.Errorf("command section %s", got[CommandPlugin])
	}

	for body, want := range map[string]string{
		"plugins: [A::Plugin]\n":                               "plugins (line 1) must map plugin names",
		"plugins:\n  A::Plugin: 5\n":                           "plugins.A::Plugin (line 2): the settings must be a mapping",
		"plugins:\n  Disbatch::Plugin::Command: {allow: []}\n": "configured under command:",
	} {
		_, err := Load(write(t, "den.yaml", body), nil)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "den.yaml") {
			t.Errorf("%q: error %v, want one naming the file and %q", body, err, want)
		}
	}
}

func TestWebKeys(t *testing.T) {
	c, err := Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.WebListen != "127.0.0.1:8080" || c.WebToken != "" {
		t.Errorf("defaults: listen %q token %q; want 127.0.0.1:8080 and none (read-only)", c.WebListen, c.WebToken)
	}
	if _, err := Load(write(t, "den.yaml", "web:\n  token: short\n"), nil); err == nil || !strings.Contains(err.Error(), "web.token is 5 characters") {
		t.Errorf("a 5-character token gave %v", err)
	}
	if _, err := Load(write(t, "den.yaml", "web:\n  listen: 8080\n"), nil); err == nil || !strings.Contains(err.Error(), "web.listen") {
		t.Errorf("listen 8080 gave %v", err)
	}
	file := write(t, "den.yaml", "web:\n  listen: 0.0.0.0:9000\n")
	t.Setenv("DEN_WEB_TOKEN", "0123456789abcdef-secret")
	c, err = Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.WebListen != "0.0.0.0:9000" || c.WebToken != "0123456789abcdef-secret" {
		t.Errorf("listen %q token %q", c.WebListen, c.WebToken)
	}
	settings, _, err := Explain(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, s := range settings {
		switch s.Key {
		case "web.token":
			seen++
			if strings.Contains(s.String(), "secret") || s.Source != "environment DEN_WEB_TOKEN" {
				t.Errorf("config print shows web.token as %q from %q; want it hidden, from the environment", s.String(), s.Source)
			}
		case "web.listen":
			seen++
			if s.String() != "0.0.0.0:9000" || s.Source != "file "+file {
				t.Errorf("web.listen %q from %q", s.String(), s.Source)
			}
		}
	}
	if seen != 2 {
		t.Errorf("config print lists %d of the web keys, want 2", seen)
	}
}

// http.listen: off by default; set by the file, DEN_HTTP_LISTEN or
// --http-listen (highest wins), and explained by den config print; an
// address without a host (every interface) or without a port is refused.
func TestHTTPListen(t *testing.T) {
	c, err := Load(write(t, "den.yaml", "mongo:\n  uri: mongodb://h/\n"), nil)
	if err != nil || c.HTTPListen != "" {
		t.Fatalf("default http.listen %q (%v), want none", c.HTTPListen, err)
	}
	file := write(t, "den.yaml", "mongo:\n  uri: mongodb://h/\nhttp:\n  listen: 127.0.0.1:9187\n")
	if c, err = Load(file, nil); err != nil || c.HTTPListen != "127.0.0.1:9187" {
		t.Fatalf("file: http.listen %q (%v)", c.HTTPListen, err)
	}
	t.Setenv("DEN_HTTP_LISTEN", "[::1]:9188")
	if c, err = Load(file, nil); err != nil || c.HTTPListen != "[::1]:9188" {
		t.Fatalf("environment: http.listen %q (%v)", c.HTTPListen, err)
	}
	fs := pflag.NewFlagSet("den", pflag.ContinueOnError)
	AddFlags(fs)
	if err := fs.Parse([]string{"--http-listen", "0.0.0.0:9189"}); err != nil {
		t.Fatal(err)
	}
	settings, c, err := Explain(file, fs)
	if err != nil || c.HTTPListen != "0.0.0.0:9189" {
		t.Fatalf("flag: http.listen %q (%v)", c.HTTPListen, err)
	}
	for _, s := range settings {
		if s.Key == "http.listen" && (s.Value != "0.0.0.0:9189" || s.Source != "flag --http-listen") {
			t.Errorf("config print: http.listen %v from %q", s.Value, s.Source)
		}
	}
	for body, want := range map[string]string{
		"http:\n  listen: :9187\n":          "has no host",
		"http:\n  listen: localhost\n":      "must be host:port",
		"http:\n  listen: 127.0.0.1:http\n": "must be a number",
		"http:\n  listen: [a, b]\n":         "http.listen must be a single value",
	} {
		t.Setenv("DEN_HTTP_LISTEN", "")
		os.Unsetenv("DEN_HTTP_LISTEN")
		_, err := Load(write(t, "den.yaml", body), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one saying %q", body, err, want)
		}
	}
}
