package config

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins/command"
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
	if c.MongoURI != "mongodb://127.0.0.1:27017/" || c.Database != "disbatch" || c.Interval != time.Second || c.OrphanAge != 5*time.Minute || c.GFS != "auto" || c.Command.CPU != command.DefaultCPU {
		t.Fatalf("den.yaml: %+v", c)
	}

	// The package's: each task's CPU, memory and /tmp bounded.
	c, err = Load("../../scripts/den.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Command.User != "den-task" || c.Command.CPU != 1 || c.Command.MemoryMB != command.DefaultMemoryMB || c.Command.TmpMB != command.DefaultTmpMB {
		t.Fatalf("scripts/den.yaml: command %+v", c.Command)
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
	if !strings.Contains(c.URI, "task_runner:runner-pw@") {
		t.Errorf("runner URI %s", c.URI)
	}
	if !c.Runner.Direct {
		t.Error("runners of a Disbatch file with a task_runner user go through the node's relay by default; want them to keep their own user")
	}
}

// runner.max_tasks and runner.idle: defaults, values, and bad values
// named in the error.
func TestRunnerReuseKeys(t *testing.T) {
	for _, tc := range []struct {
		file     string
		maxTasks int
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
		case tc.err == "" && (c.Runner.MaxTasks != tc.maxTasks || c.Runner.Idle != tc.idle):
			t.Errorf("%q: max_tasks %d, idle %s; want %d, %s", tc.file, c.Runner.MaxTasks, c.Runner.Idle, tc.maxTasks, tc.idle)
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
		if !c.Runner.Direct != tc.want {
			t.Errorf("file %q env %q: relay %v, want %v", tc.file, tc.env, !c.Runner.Direct, tc.want)
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
	if c.MongoURI != "mongodb://env:2/" || c.Database != "fromenv" || c.Name != "flagnode" || c.GFS != "false" {
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
		{"bad uri", "den.yaml", "mongo:\n  uri: http://x/\n", `mongo.uri "http://x/": error parsing uri: scheme must be "mongodb" or "mongodb+srv"`},
		{"command.enabled not a boolean", "den.yaml", "command:\n  enabled: \"yes\"\n", "command.enabled must be true or false"},
		{"command.allow not a list of strings", "den.yaml", "command:\n  allow: [1]\n", "command.allow must be a list of strings"},
		{"command.env_allow not a list", "den.yaml", "command:\n  env_allow: 5\n", "command.env_allow must be a list of strings"},
		{"command.landlock unknown", "den.yaml", "command:\n  landlock: sometimes\n", "command.landlock \"sometimes\" must be required or optional"},
		{"command.landlock not a string", "den.yaml", "command:\n  landlock: false\n", "command.landlock must be required or optional"},
		{"command enabled without a task user", "den.yaml", "command:\n  enabled: true\n  allow: [/usr/bin/true]\n", "command.user is not set"},
		{"command.user root", "den.yaml", "command:\n  user: root\n", "not root"},
		{"command.user root's uid", "den.yaml", "command:\n  user: \"0:65534\"\n", "root's user or group"},
		{"command.user root's group", "den.yaml", "command:\n  user: \"65534:0\"\n", "root's user or group"},
		{"command.user half a uid:gid", "den.yaml", "command:\n  user: \"65534:\"\n", "must be a user name or uid:gid"},
		{"command.user a number", "den.yaml", "command:\n  user: 65534\n", "command.user 65534 must be a user name or uid:gid"},
		{"command.user_optional not a boolean", "den.yaml", "command:\n  user_optional: maybe\n", "command.user_optional must be true or false"},
		{"command.network unknown", "den.yaml", "command:\n  network: some\n", "command.network \"some\" must be all, none or a list of TCP ports"},
		{"command.network port too large", "den.yaml", "command:\n  network: [27017, 70000]\n", "port 70000 is not a TCP port"},
		{"command.network port zero", "den.yaml", "command:\n  network: [0]\n", "port 0 is not a TCP port"},
		{"command.network port a string", "den.yaml", "command:\n  network: [https]\n", "entry https must be a TCP port number"},
		{"command.network a boolean", "den.yaml", "command:\n  network: false\n", "command.network must be all, none or a list"},
		{"command.shared_tmp not a boolean", "den.yaml", "command:\n  shared_tmp: sometimes\n", "command.shared_tmp must be true or false"},
		{"command.shared_pids not a boolean", "den.yaml", "command:\n  shared_pids: 1\n", "command.shared_pids must be true or false"},
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

// A key that holds a list is never taken from a single value in den's
// file: command.allow: "/usr/bin/python3" was a one-entry list on main.
// Each list key given a string, a number, a mapping or an empty entry is
// refused at load, with the key, the value, its type and how to write the
// list; from the environment, where a list is one string separated by
// commas, and from flags, the same values are lists.
func TestListKeysTakeNoSingleValue(t *testing.T) {
	var lists []string
	for _, key := range knownKeys() {
		if _, ok := defaults[key].([]string); ok {
			lists = append(lists, key)
		}
	}
	if want := []string{"activequeues", "command.allow", "command.env", "command.env_allow", "ignorequeues", "web.dci_plugins", "web.hosts"}; !slices.Equal(lists, want) {
		t.Fatalf("the list keys are %v; this test knows %v", lists, want)
	}
	yamlOf := func(key, value string) string {
		parent, leaf, nested := strings.Cut(key, ".")
		if !nested {
			return key + ": " + value + "\n"
		}
		return parent + ":\n  " + leaf + ": " + value + "\n"
	}
	envOf := func(key string) string { return "DEN_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_")) }
	value := map[string]string{"activequeues": "q1", "ignorequeues": "q1", "web.hosts": "status.example.com", "web.dci_plugins": "Disbatch::Plugin::Demo",
		"command.allow": "/usr/bin/python3", "command.env": "LANG", "command.env_allow": "LANG"}
	for _, key := range lists {
		for _, tc := range []struct{ yaml, want string }{
			{`"` + value[key] + `"`, key + ` must be a list of strings, not "` + value[key] + `" (a string): in the file a list is written [` + value[key] + `]`},
			{value[key], key + ` must be a list of strings, not "` + value[key] + `" (a string)`},
			{`"` + value[key] + `,b"`, `in the file a list is written [` + value[key] + `, b]`},
			{"5", key + " must be a list of strings, not 5 (a number)"},
			{"{a: b}", "unknown keys " + key + ".a"},
			{`[` + value[key] + `, ""]`, key + " must be a list of strings; its entry 2 is empty"},
			{"[1]", key + " must be a list of strings; its entry 1 is 1 (a number)"},
		} {
			path := write(t, "den.yaml", yamlOf(key, tc.yaml))
			if _, err := Load(path, nil); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: %s in the file: %v; want an error naming the file and saying %q", key, tc.yaml, err, tc.want)
			}
		}
		// An empty list, written either way, is a list.
		for _, empty := range []string{"[]", ""} {
			if _, err := Load(write(t, "den.yaml", yamlOf(key, empty)), nil); err != nil {
				t.Errorf("%s: %q in the file: %v", key, empty, err)
			}
		}
		t.Run(key+" from the environment", func(t *testing.T) {
			second := "b"
			if key == "command.allow" {
				second = "/usr/bin/perl"
			}
			t.Setenv(envOf(key), value[key]+","+second)
			c, err := Load("", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := effective(c)[key]; !slices.Equal(got.([]string), []string{value[key], second}) {
				t.Errorf("%s=%s,%s: %v, want two entries", envOf(key), value[key], second, got)
			}
		})
	}
	t.Setenv("DEN_COMMAND_ALLOW", "/usr/bin/python3")
	c, err := Load("", nil)
	if err != nil || !slices.Equal(c.Command.Allow, []string{"/usr/bin/python3"}) {
		t.Errorf("DEN_COMMAND_ALLOW=/usr/bin/python3: %v, %v; want that one entry", c.Command.Allow, err)
	}
	t.Setenv("DEN_COMMAND_ALLOW", "")
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	AddFlags(fs)
	if err := fs.Parse([]string{"--activequeues", "q1"}); err != nil {
		t.Fatal(err)
	}
	if c, err := Load("", fs); err != nil || !slices.Equal(c.ActiveQueues, []string{"q1"}) {
		t.Errorf("--activequeues q1: %v, %v", c.ActiveQueues, err)
	}
	// command.network is all, none or a list of ports: a string of ports
	// is the environment's form only.
	for _, bad := range []string{`"443"`, `"443,8443"`, "443"} {
		if _, err := Load(write(t, "den.yaml", "command:\n  network: "+bad+"\n"), nil); err == nil || !strings.Contains(err.Error(), "command.network") {
			t.Errorf("command.network: %s in the file: %v, want it refused", bad, err)
		}
	}
	for _, good := range []string{"all", "none", "[443, 8443]", `" none "`} {
		if _, err := Load(write(t, "den.yaml", "command:\n  network: "+good+"\n"), nil); err != nil {
			t.Errorf("command.network: %s in the file: %v", good, err)
		}
	}
	t.Setenv("DEN_COMMAND_NETWORK", "443,8443")
	if c, err := Load("", nil); err != nil || c.Command.Network.String() == "all" {
		t.Errorf("DEN_COMMAND_NETWORK=443,8443: %v, %v", c.Command.Network, err)
	}
}

// A MongoDB URI the driver cannot parse is refused at load, with the
// driver's reason and where the URI came from, never its password: on
// main DEN_MONGO_URI=junk became mongodb://junk (a host named junk), and
// den run retried for ever. A mongodb+srv URI is checked without a DNS
// lookup.
func TestMongoURIRefused(t *testing.T) {
	const pw = "s3cret-pw"
	for _, tc := range []struct{ uri, want string }{
		{"junk", `error parsing uri: scheme must be "mongodb" or "mongodb+srv" (a URI such as mongodb://junk/`},
		{"db1:27017", `scheme must be "mongodb" or "mongodb+srv"`},
		{"http://db1/", `scheme must be "mongodb" or "mongodb+srv"`},
		{"mongodb://", "must have at least 1 host"},
		{"mongodb://den:" + pw + "@db1:99999/", "port must be in the range [1, 65535]"},
		{"mongodb://den:" + pw + "@db1?replicaSet=rs0", "must have a / before the query ?"},
		{"mongodb://den:s3cret@pw@db1/", "unescaped @ sign in user info"},
		{"mongodb://den:s3cret:pw@db1/", "unescaped colon in password"},
		{"mongodb://den:s3cret%zzpw@db1/", "invalid password: invalid URL escape (a % not followed by two hex digits"},
		{"mongodb://den:" + pw + "@db1/?tlsCertificateKeyFilePassword=" + pw + "%zz", "invalid option value"},
		{"mongodb://den:" + pw + "@db1/?w=0&journal=true", "a write concern cannot have both w=0 and j=true"},
		{"mongodb://den:" + pw + "@db1/?authMechanism=BOGUS", "invalid auth mechanism"},
		{"mongodb+srv://den:" + pw + "@cluster.example.com:27017/", "a mongodb+srv URI names one host, without a port"},
		{"mongodb+srv://den:" + pw + "@a.example.com,b.example.com/", "a mongodb+srv URI names one host"},
	} {
		for _, from := range []string{"mongo.uri", "DEN_MONGO_URI", "--mongo-uri"} {
			var path string
			var fs *pflag.FlagSet
			switch from {
			case "mongo.uri":
				path = write(t, "den.yaml", fmt.Sprintf("mongo:\n  uri: %q\n", tc.uri))
			case "DEN_MONGO_URI":
				t.Setenv("DEN_MONGO_URI", tc.uri)
			case "--mongo-uri":
				fs = pflag.NewFlagSet("x", pflag.ContinueOnError)
				AddFlags(fs)
				if err := fs.Parse([]string{"--mongo-uri", tc.uri}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Load(path, fs)
			t.Setenv("DEN_MONGO_URI", "")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), from+` "`) {
				t.Errorf("%s %s: %v; want an error naming %s and saying %q", from, tc.uri, err, from, tc.want)
				continue
			}
			for _, secret := range []string{pw, "s3cret", "zzpw", "%zz"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("%s %s: the error shows the password (%q): %v", from, tc.uri, secret, err)
				}
			}
		}
	}
	for _, uri := range []string{"mongodb://db1/", "mongodb://den:p%40ss@db1,db2:27018/?replicaSet=rs0&w=1",
		"mongodb+srv://den:pw@cluster.invalid/?srvMaxHosts=2&srvServiceName=mongo",
		"mongodb://db1/?tls=true&tlsCAFile=/nonexistent/ca.pem"} { // the file is read when den connects
		t.Setenv("DEN_MONGO_URI", uri)
		if c, err := Load("", nil); err != nil || c.MongoURI != uri {
			t.Errorf("DEN_MONGO_URI=%s: %q, %v", uri, c.MongoURI, err)
		}
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
	if c.MongoURI != "mongodb://other:27017/" || c.URI != c.MongoURI {
		t.Fatalf("node %s runner %s", c.MongoURI, c.URI)
	}
}

// The command plugin's keys and max_output, with their defaults, from the
// file and from the environment.
func TestCommandAndMaxOutputKeys(t *testing.T) {
	c, err := Load(write(t, "den.yaml", "mongo:\n  uri: mongodb://h/\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxOutput != 1<<30 || c.Command.Landlock != "required" || c.Command.Enabled || len(c.Command.EnvAllow) != 0 || c.Command.User != "" || c.Command.UserOptional || !c.Command.Network.All() || c.Command.CPU != command.DefaultCPU || c.Command.MemoryMB != command.DefaultMemoryMB {
		t.Fatalf("defaults: max_output %d, command %+v", c.MaxOutput, c.Command)
	}
	file := write(t, "den.yaml", "mongo:\n  uri: mongodb://h/\nmax_output: 1048576\ncommand:\n  enabled: true\n  allow: [/usr/bin/]\n  env_allow: [LANG, LC_*]\n  landlock: optional\n  user: nobody\n  shared_tmp: true\n  shared_pids: true\n  network: [443, 8080]\n  cpu: 0.5\n")
	c, err = Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxOutput != 1<<20 || !c.Command.Enabled || c.Command.Landlock != "optional" || strings.Join(c.Command.EnvAllow, ",") != "LANG,LC_*" || c.Command.User != "nobody" || !c.Command.SharedTmp || !c.Command.SharedPIDs || c.Command.Network.String() != "[443, 8080]" || c.Command.CPU != 0.5 {
		t.Fatalf("file: max_output %d, command %+v", c.MaxOutput, c.Command)
	}
	t.Setenv("DEN_MAX_OUTPUT", "4096")
	t.Setenv("DEN_COMMAND_ENABLED", "false")
	t.Setenv("DEN_COMMAND_ENV_ALLOW", "MYAPP_")
	t.Setenv("DEN_COMMAND_USER", "65534:65534")
	t.Setenv("DEN_COMMAND_USER_OPTIONAL", "true")
	t.Setenv("DEN_COMMAND_NETWORK", "none")
	t.Setenv("DEN_COMMAND_CPU", "2.5")
	c, err = Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxOutput != 4096 || c.Command.Enabled || strings.Join(c.Command.EnvAllow, ",") != "MYAPP_" || c.Command.User != "65534:65534" || !c.Command.UserOptional || !c.Command.Network.None || c.Command.CPU != 2.5 {
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
	got := c.PluginConfig
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
	t.Setenv("DEN_WEB_TOKEN", "Xq7vB2mK9pL4wZ8r-secret")
	c, err = Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.WebListen != "0.0.0.0:9000" || c.WebToken != "Xq7vB2mK9pL4wZ8r-secret" {
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

// web.token bounds guessing on the web page (its right token is accepted
// from any address, so every guess is answered): a token den can tell is
// weak is refused at start, from the file or the environment, with an
// error that does not show it; what random generators make is accepted.
func TestWebTokenStrength(t *testing.T) {
	random := func(n int, enc func([]byte) string) string {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return enc(b)
	}
	for _, tc := range []struct {
		token string
		want  string // the error's words; "" accepted
	}{
		{"short", "web.token is 5 characters; use at least 16"},
		{"aaaaaaaaaaaaaaaa", "too easy to guess"},
		{"passwordpassword", "too easy to guess"},
		{"0123456789abcdef", "too easy to guess"},
		{"qwertyuiopasdfgh", "too easy to guess"},
		{"Password1234567!", "too easy to guess"},
		{"AbCdEfGhIjKlMnOpQrStUvWx", "too easy to guess"},
		{"test-token-0123456789", "too easy to guess"},
		{random(8, hex.EncodeToString), "too easy to guess"}, // openssl rand -hex 8: 64 bits
		{random(32, hex.EncodeToString), ""},                 // openssl rand -hex 32, as the docs say
		{random(16, hex.EncodeToString), ""},
		{strings.ToUpper(random(16, hex.EncodeToString)), ""},
		{random(18, base64.StdEncoding.EncodeToString), ""}, // openssl rand -base64 18
		{random(16, base64.RawURLEncoding.EncodeToString), ""},
		{"d6f2e1b0-8c3a-4f7e-9b5d-2a1c0e8f7b6d", ""}, // a UUID
	} {
		for _, from := range []string{"file", "environment"} {
			var path string
			if from == "file" {
				path = write(t, "den.yaml", fmt.Sprintf("web:\n  token: %q\n", tc.token))
			} else {
				t.Setenv("DEN_WEB_TOKEN", tc.token)
			}
			c, err := Load(path, nil)
			t.Setenv("DEN_WEB_TOKEN", "")
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s %q refused: %v", from, tc.token, err)
			case tc.want == "" && c.WebToken != tc.token:
				t.Errorf("%s %q loaded as %q", from, tc.token, c.WebToken)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%s %q: %v, want an error saying %q", from, tc.token, err, tc.want)
			case tc.want != "" && strings.Contains(err.Error(), tc.token):
				t.Errorf("%s %q: the error shows the token: %v", from, tc.token, err)
			}
		}
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

// boundsCases are TestBoundsRefused's: a key, and one of the file's body,
// DEN_<KEY>'s value and --<key>'s value; want is "" when it loads.
var boundsCases = []struct {
	key, file, env, flag string
	want                 string
}{
	{"interval", "", "1ns", "", "interval: 1ns is below the minimum 100ms (allowed: 100ms to 30s)"},
	{"interval", "interval: 0\n", "", "", "interval: 0s is below the minimum 100ms"},
	{"interval", "", "", "1ms", "interval: 1ms is below the minimum 100ms"},
	{"interval", "interval: 31s\n", "", "", "interval: 31s is above the maximum 30s (allowed: 100ms to 30s)"},
	{"interval", "interval: 1e300\n", "", "", "interval \"1e+300\" is not a duration such as 1s (allowed: 100ms to 30s)"},
	{"interval", "interval: 100ms\n", "", "", ""},
	{"interval", "", "30s", "", ""},
	{"orphan_age", "orphan_age: 1s\n", "", "", "orphan_age: 1s is below the minimum 30s (allowed: 30s to 24h)"},
	{"orphan_age", "", "25h", "", "orphan_age: 25h is above the maximum 24h"},
	{"orphan_age", "orphan_age: 24h\n", "", "", ""},
	{"max_termination_time", "max_termination_time: 10ms\n", "", "", "max_termination_time: 10ms is below the minimum 1s (allowed: 1s to 1h)"},
	{"max_termination_time", "max_termination_time: 2h\n", "", "", "max_termination_time: 2h is above the maximum 1h"},
	{"max_termination_time", "max_termination_time: 1\n", "", "", ""}, // a bare number is seconds
	{"dead_node_after", "dead_node_after: 59s\n", "", "", "dead_node_after: 59s is below the minimum 1m (allowed: 1m to 24h)"},
	{"dead_node_after", "", "1000h", "", "dead_node_after: 1000h is above the maximum 24h"},
	{"dead_node_after", "dead_node_after: 1m\n", "", "", ""},
	{"runner.idle", "runner:\n  idle: 1ms\n", "", "", "runner.idle: 1ms is below the minimum 1s (allowed: 1s to 1h)"},
	{"runner.idle", "", "90m", "", "runner.idle: 1h30m is above the maximum 1h"},
	{"runner.max_tasks", "", "0", "", "runner.max_tasks: 0 is below the minimum 1 (allowed: 1 to 100000 tasks)"},
	{"runner.max_tasks", "runner:\n  max_tasks: 100001\n", "", "", "runner.max_tasks: 100001 is above the maximum 100000"},
	{"runner.max_tasks", "runner:\n  max_tasks: 100000\n", "", "", ""},
	{"runner.max_processes", "runner:\n  max_processes: 0\n", "", "", "runner.max_processes: 0 is below the minimum 1 (allowed: 1 to 4194304 processes)"},
	{"runner.max_processes", "", "4194305", "", "runner.max_processes: 4194305 is above the maximum 4194304"},
	{"runner.max_processes", "runner:\n  max_processes: 4194304\n", "", "", ""},
	{"max_output", "max_output: 100\n", "", "", "max_output: 100 is below the minimum 1024 (allowed: 1024 to 1099511627776 bytes)"},
	{"max_output", "", "9223372036854775807", "", "max_output: 9223372036854775807 is above the maximum 1099511627776"},
	{"max_output", "max_output: 1024\n", "", "", ""},
	{"resources.memory_mb", "resources:\n  memory_mb: -1\n", "", "", "resources.memory_mb: -1 is below the minimum 0 (allowed: 0 to 16777216 MiB)"},
	{"resources.memory_mb", "", "1e9", "", "resources.memory_mb: 1000000000 is above the maximum 16777216"},
	{"resources.memory_mb", "", "NaN", "", "resources.memory_mb NaN is not a number"},
	{"resources.cpus", "resources:\n  cpus: -0.5\n", "", "", "resources.cpus: -0.5 is below the minimum 0 (allowed: 0 to 8192 cores)"},
	{"resources.cpus", "", "100000", "", "resources.cpus: 100000 is above the maximum 8192"},
	{"resources.cpus", "", "+Inf", "", "resources.cpus +Inf is not a number"},
	{"resources.busy_core_percent", "", "-1", "", "resources.busy_core_percent: -1 is below the minimum 0 (allowed: 0 to 100 percent)"},
	{"resources.busy_core_percent", "resources:\n  busy_core_percent: 150\n", "", "", "resources.busy_core_percent: 150 is above the maximum 100"},
	{"resources.busy_core_percent", "resources:\n  busy_core_percent: 100\n", "", "", ""},
	{"retention.succeeded", "retention:\n  succeeded: -1h\n", "", "", "retention.succeeded: -1h is below the minimum 0s (allowed: 0s to 876000h)"},
	{"retention.succeeded", "", "876001h", "", "retention.succeeded: 876001h is above the maximum 876000h"},
	{"retention.succeeded", "retention:\n  succeeded: 30s\n", "", "", "retention.succeeded 30s is below 1m: write 0 to keep everything"},
	{"retention.succeeded", "retention:\n  succeeded: 168h\n  action: archive\n", "", "", ""},
	{"retention.failed", "", "-1s", "", "retention.failed: -1s is below the minimum 0s"},
	{"retention.failed", "retention:\n  failed: 1000000h\n", "", "", "retention.failed: 1000000h is above the maximum 876000h"},
	{"retention.cancelled", "", "-1s", "", "retention.cancelled: -1s is below the minimum 0s"},
	{"retention.cancelled", "", "900000h", "", "retention.cancelled: 900000h is above the maximum 876000h"},
	{"retention.orphaned", "", "-1s", "", "retention.orphaned: -1s is below the minimum 0s"},
	{"retention.orphaned", "", "900000h", "", "retention.orphaned: 900000h is above the maximum 876000h"},
	{"command.tmp_mb", "command:\n  tmp_mb: -1\n", "", "", "command.tmp_mb: -1 is below the minimum 0 (allowed: 0 to 16777216 MiB)"},
	{"command.tmp_mb", "", "16777217", "", "command.tmp_mb: 16777217 is above the maximum 16777216"},
	{"command.tmp_mb", "command:\n  tmp_mb: 0\n", "", "", ""},
	{"command.memory_mb", "command:\n  memory_mb: -2048\n", "", "", "command.memory_mb: -2048 is below the minimum 0 (allowed: 0 to 16777216 MiB)"},
	{"command.memory_mb", "", "16777217", "", "command.memory_mb: 16777217 is above the maximum 16777216"},
	{"command.memory_mb", "", "4096", "", ""},
	{"command.memory_mb", "", "32", "", "command.memory_mb 32 must be 0 (no limit) or at least 64 MiB"},
	{"command.cpu", "command:\n  cpu: -1\n", "", "", "command.cpu: -1 is below the minimum 0 (allowed: 0 to 8192 cores)"},
	{"command.cpu", "", "8193", "", "command.cpu: 8193 is above the maximum 8192"},
	{"command.cpu", "", "NaN", "", "command.cpu NaN is not a number"},
	{"command.cpu", "", "0.001", "", "command.cpu 0.001 must be 0 (no limit) or 0.01 to 8192 cores"},
	{"command.cpu", "command:\n  cpu: 1.5\n", "", "", ""},
	{"command.cpu", "", "0", "", ""},
	{"web.counts_age", "web:\n  counts_age: -1s\n", "", "", "web.counts_age: -1s is below the minimum 0s"},
	{"web.counts_age", "", "2h", "", "web.counts_age: 2h is above the maximum 1h (allowed: 0s to 1h)"},
	{"web.counts_age", "", "30s", "", ""},
	{"retention.action", "retention:\n  action: shred\n", "", "", "retention.action \"shred\" must be delete or archive"},
	{"retention.reports", "", "burn", "", "retention.reports \"burn\" must be keep or delete"},
}

// Every duration and number key is refused outside its range, from the
// file, the environment and flags, with an error that names the key, the
// value and the range; its ends are accepted.
func TestBoundsRefused(t *testing.T) {
	cases := boundsCases
	below, above := map[string]bool{}, map[string]bool{}
	for _, tc := range cases {
		name := tc.key + " " + strings.TrimSpace(tc.file+tc.env+tc.flag)
		t.Run(name, func(t *testing.T) {
			path := write(t, "den.yaml", "mongo:\n  uri: mongodb://h/\n"+tc.file)
			if tc.env != "" {
				t.Setenv("DEN_"+strings.ToUpper(strings.ReplaceAll(tc.key, ".", "_")), tc.env)
			}
			fs := pflag.NewFlagSet("den", pflag.ContinueOnError)
			AddFlags(fs)
			if tc.flag != "" {
				if err := fs.Parse([]string{"--" + tc.key, tc.flag}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Load(path, fs)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
		below[tc.key] = below[tc.key] || strings.Contains(tc.want, "below the minimum")
		above[tc.key] = above[tc.key] || strings.Contains(tc.want, "above the maximum")
	}
	for key := range bounds {
		if !below[key] || !above[key] {
			t.Errorf("%s: no case refuses a value below its minimum and one above its maximum", key)
		}
	}
}

// Every key whose default is a duration or a number has a range, and its
// default is inside it: a key added without one fails here.
func TestEveryDurationAndNumberKeyHasBounds(t *testing.T) {
	for key, d := range defaults {
		b, ok := bounds[key]
		var x float64
		switch d := d.(type) {
		case int64:
			x = float64(d)
		case float64:
			x = d
		case string:
			dur, err := time.ParseDuration(d)
			if err != nil {
				continue
			}
			x = float64(dur)
		default:
			continue
		}
		if !ok {
			t.Errorf("%s (default %v) has no bounds", key, d)
			continue
		}
		if err := b.check(key, x, fmt.Sprint(d)); err != nil {
			t.Errorf("the default is refused: %v", err)
		}
	}
	for key := range bounds {
		if _, ok := defaults[key]; !ok {
			t.Errorf("bounds has %s, which is not a key", key)
		}
	}
}

// docs/configuration.md lists every range as bounds declares it.
func TestBoundsTableInDocs(t *testing.T) {
	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, defs := map[string]string{}, map[string]string{}
	for _, line := range strings.Split(string(readme), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) == 6 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			key := strings.Trim(strings.TrimSpace(cells[1]), "`")
			rows[key], defs[key] = strings.TrimSpace(cells[3]), strings.TrimSpace(cells[2])
		}
	}
	for key, b := range bounds {
		if got, ok := rows[key]; !ok {
			t.Errorf("docs/configuration.md has no row | `%s` | default | %s | why |", key, b.Range())
		} else if got != b.Range() {
			t.Errorf("docs/configuration.md says %s allows %q; bounds says %q", key, got, b.Range())
		}
		// The default as the docs write it is the code's default.
		doc, code := defs[key], fmt.Sprint(defaults[key])
		if dd, err := time.ParseDuration(doc); err == nil {
			if cd, err := time.ParseDuration(code); err != nil || cd != dd {
				t.Errorf("docs/configuration.md says %s defaults to %s; the code has %s", key, doc, code)
			}
			continue
		}
		if df, err := strconv.ParseFloat(doc, 64); err != nil || fmt.Sprint(df) != fmt.Sprint(toFloat(defaults[key])) {
			t.Errorf("docs/configuration.md says %s defaults to %s; the code has %s", key, doc, code)
		}
	}
}

// A node name with a control character or another character that is not
// printable, or longer than MaxNodeNameLength bytes, is refused wherever it
// comes from; printable names of any script load.
func TestNodeNamesArePrintable(t *testing.T) {
	for _, tc := range []struct {
		name, file, env, flag string
		want                  string // "" when it loads
	}{
		{"escape sequence in the environment", "", "evil\x1b[2Jnode", "", `node name "evil\x1b[2Jnode" has a character that is not printable (U+001B at byte 4)`},
		{"newline on the command line", "", "", "a\nforged log line", `node name "a\nforged log line" has a character that is not printable (U+000A`},
		{"escape in the file", "node: \"a\\x1b]0;title\\x07\"\n", "", "", `(U+001B at byte 1)`},
		{"tab", "", "a\tb", "", `(U+0009`},
		{"C1 control (CSI)", "", "a\u009bb", "", `(U+009B`},
		{"bidi override", "", "a\u202eb", "", `(U+202E`},
		{"invalid UTF-8", "", "a\xffb", "", `node name "a\xffb" is not valid UTF-8`},
		{"256 bytes", "", strings.Repeat("n", 256), "", "node name is 256 bytes; at most 255 are allowed"},
		{"255 bytes", "", strings.Repeat("n", 255), "", ""},
		{"a DNS name", "", "worker01.example.com", "", ""},
		{"letters of any script and a space", "", "nœud 1", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, "den.yaml", "mongo:\n  uri: mongodb://h/\n"+tc.file)
			if tc.env != "" {
				t.Setenv("DEN_NODE", tc.env)
			}
			fs := pflag.NewFlagSet("den", pflag.ContinueOnError)
			AddFlags(fs)
			if tc.flag != "" {
				if err := fs.Parse([]string{"--node", tc.flag}); err != nil {
					t.Fatal(err)
				}
			}
			c, err := Load(path, fs)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "" && c.Name != tc.env:
				t.Fatalf("node %q, want %q", c.Name, tc.env)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %s", err, tc.want)
			//lint:ignore SA1011 the invalid byte is meant: ContainsAny decodes it, and any invalid byte in the error, as utf8.RuneError, so a raw invalid byte in the error is caught
			case tc.want != "" && strings.ContainsAny(err.Error(), "\x1b\n\t\u009b\u202e\xff"):
				t.Fatalf("the error carries the raw character: %q", err)
			}
		})
	}
}

// Each DEN_ variable that is neither a setting nor one den, its runners,
// its service unit or its tests use is one warning naming it; the others
// are silent.
func TestUnknownDenVariablesWarn(t *testing.T) {
	for _, name := range []string{"DEN_FOO", "DEN_INTERVALL", "DEN_PLUGINS", "DEN_DISBATCH_URI", "DEN_\x1b[2J"} {
		t.Setenv(name, "x")
	}
	for name, value := range map[string]string{
		// Settings.
		"DEN_NODE": "n", "DEN_DATABASE": "d", "DEN_MONGO_DATABASE": "d", "DEN_INTERVAL": "2s",
		"DEN_RUNNER_MAX_TASKS": "5", "DEN_RESOURCES_BUSY_CORE_PERCENT": "50", "DEN_HTTP_WEB": "false",
		// What den's service unit, runners and tests set.
		"DEN_CONFIG": "/etc/disbatch/config.json", "DEN_ARGS": "", "DEN_RUN": "x.y",
		runner.SpecEnv: "{}", runner.EnvRelayFD: "3", runner.EnvTasksFD: "4", sandbox.EnvSpec: "{}",
		"DEN_RUNNER_WORKER": "1", "DEN_RUNNER_SUPERVISOR": "1:2",
		"DEN_TEST_ROLE": "node", "DEN_TEST_ANYTHING": "1", "DEN_BENCH_TASKS": "10", "DEN_WEB_SCREENSHOTS": "testdata/web",
	} {
		t.Setenv(name, value)
	}
	c, err := Load(write(t, "den.yaml", "mongo:\n  uri: mongodb://h/\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"DEN_DISBATCH_URI", "DEN_FOO", "DEN_INTERVALL", "DEN_PLUGINS", `"DEN_\x1b[2J"`}
	if len(c.Warnings) != len(want) {
		t.Fatalf("%d warnings, want one for each of %v:\n%s", len(c.Warnings), want, strings.Join(c.Warnings, "\n"))
	}
	for _, name := range want {
		n := 0
		for _, w := range c.Warnings {
			if strings.Contains(w, "environment variable "+name+" is not a den setting") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d warnings name %s, want 1:\n%s", n, name, strings.Join(c.Warnings, "\n"))
		}
	}
	for _, w := range c.Warnings {
		if strings.Contains(w, "\x1b") {
			t.Errorf("warning %q carries a raw escape", w)
		}
	}
	if c.Interval != 2*time.Second || c.Runner.MaxTasks != 5 {
		t.Errorf("the settings among them were not read: interval %s, max_tasks %d", c.Interval, c.Runner.MaxTasks)
	}
	// The same in den config print, which names the source of each key.
	settings, _, err := Explain(write(t, "den.yaml", "mongo:\n  uri: mongodb://h/\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		if s.Key == "plugins" && s.Source != "default" {
			t.Errorf("DEN_PLUGINS shows as the source of plugins: %q", s.Source)
		}
	}
}

// DEN_DISBATCH_URI set to the URI of the environment does not make a
// Disbatch file's task_runner password go to that URI.
func TestRunnerUserNotGraftedByEnvironment(t *testing.T) {
	t.Setenv("DEN_MONGO_URI", "mongodb://elsewhere.example:27017/")
	t.Setenv("DEN_DISBATCH_URI", "mongodb://elsewhere.example:27017/")
	c, err := Load("../../testdata/disbatch-config.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(c.URI, "runner-pw") {
		t.Fatalf("the file's task_runner password went to the environment's URI: %s", redact(c.URI))
	}
}

// A Disbatch config.json whose keys den reads hold the wrong type is
// refused, naming the file, the key and what it holds; a password is
// described by its type, never shown.
func TestDisbatchWrongTypesRefused(t *testing.T) {
	const base = `"mongohost": "db:27017", "database": "d"`
	for _, tc := range []struct {
		name, body, want string
	}{
		{"auth a string", `{` + base + `, "auth": "notanobject"}`, `auth must be an object of MongoDB passwords by user, such as {"disbatchd": "PASSWORD", "task_runner": "PASSWORD"}, not a string`},
		{"auth an array", `{` + base + `, "auth": ["disbatchd", "pw"]}`, `auth must be an object of MongoDB passwords by user`},
		{"auth.disbatchd a number", `{` + base + `, "auth": {"disbatchd": 31415926}}`, "auth.disbatchd must be a password (a string), not a number"},
		{"auth.task_runner an object", `{` + base + `, "auth": {"task_runner": {"pw": "31415926"}}}`, "auth.task_runner must be a password (a string), not an object"},
		{"mongohost a number", `{"mongohost": 5, "database": "d"}`, `mongohost must be a string such as "mongodb://127.0.0.1:27017", not 5 (a number)`},
		{"mongohost an array", `{"mongohost": ["a", "b"], "database": "d"}`, `mongohost must be a string such as "mongodb://127.0.0.1:27017", not ["a","b"] (an array)`},
		{"database a boolean", `{"mongohost": "h", "database": true}`, "database must be a non-empty string, not true (a boolean)"},
		{"attributes a string", `{` + base + `, "attributes": "ssl"}`, `attributes must be an object such as {"ssl": {"SSL_ca_file": "/etc/ssl/certs/ca-bundle.crt"}}, not "ssl" (a string)`},
		{"attributes.ssl a string", `{` + base + `, "attributes": {"ssl": "yes"}}`, `attributes.ssl must be true, false or an object of SSL options`},
		{"SSL_ca_file a number", `{` + base + `, "attributes": {"ssl": {"SSL_ca_file": 1}}}`, "attributes.ssl.SSL_ca_file must be a file name (a string), not 1 (a number)"},
		{"SSL_verify_mode a string", `{` + base + `, "attributes": {"ssl": {"SSL_verify_mode": "0"}}}`, `attributes.ssl.SSL_verify_mode must be a number (0: no verification), not "0" (a string)`},
		{"activequeues of numbers", `{` + base + `, "activequeues": ["q1", 5]}`, "activequeues[1] must be a queue id or name (a string), not 5 (a number)"},
		{"ignorequeues an object", `{` + base + `, "ignorequeues": {"q": 1}}`, `ignorequeues must be an array of queue ids, not {"q":1} (an object)`},
		{"gfs an object", `{` + base + `, "gfs": {"auto": true}}`, `gfs must be true, false or "auto", not {"auto":true} (an object)`},
		{"escape in a value", `{"mongohost": ["\u001b[2J"], "database": "d"}`, `not ["\u001b[2J"] (an array)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, "config.json", tc.body)
			_, err := Load(path, nil)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s and saying %s", err, path, tc.want)
			}
			if strings.Contains(err.Error(), "31415926") || strings.Contains(err.Error(), "\x1b") {
				t.Fatalf("the error shows a password or a raw escape: %v", err)
			}
		})
	}
	// The values Disbatch's own files hold still load; Perl's false (0)
	// leaves TLS off.
	for body, tls := range map[string]bool{
		`{` + base + `, "attributes": {"ssl": 0}, "auth": {"disbatchd": "pw", "disbatch_web": "pw2", "plugin": null}, "gfs": 1}`: false,
		`{` + base + `, "attributes": {"ssl": 1}}`: true,
		`{` + base + `, "attributes": {"ssl": {"SSL_ca_file": "/ca.crt", "SSL_verify_mode": 0}}, "activequeues": [], "ignorequeues": null}`: true,
		`{` + base + `, "attributes": null, "auth": null, "gfs": "auto"}`:                                                                   false,
	} {
		c, err := Load(write(t, "config.json", body), nil)
		if err != nil {
			t.Errorf("%s: %v", body, err)
			continue
		}
		if strings.Contains(c.MongoURI, "tls=true") != tls {
			t.Errorf("%s: URI %s; want TLS %v", body, redact(c.MongoURI), tls)
		}
	}
}

// toFloat is a number default as a float64.
func toFloat(v any) float64 {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case int:
		return float64(n)
	case float64:
		return n
	}
	return -1
}
