package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/den-project/den/den"
	"github.com/den-project/den/plugins/command"
	"github.com/den-project/den/queue"
)

// Config is a node's configuration after loading: what the node runs
// with (den.Config, which den run hands to den.New as it is, adding only
// what a running process has: its metrics, its HTTP listener, its
// version), and the settings of den's commands around the node (MongoDB,
// logs, den web, the HTTP endpoint).
//
// Of den.Config, loading sets Name (the node key; empty means the
// hostname), Database, URI (the URI task runners use: MongoURI, or
// MongoURI with the task_runner credentials of a Disbatch config file),
// ActiveQueues, IgnoreQueues, GFS ("true", "false", "auto", or empty when
// not configured: then the config collection decides, else auto),
// Runner.Log (file for task runner logs; empty: the node's stderr),
// Runner.Direct (the opposite of runner.relay, below), Cgroups (auto, on
// or off), PluginConfig (the plugins key's sections and the command
// section), and every key of den.Settings (interval, orphan_age,
// max_termination_time, dead_node_after, runner.*, max_output,
// resources.*, retention.*), with their defaults and ranges.
//
// runner.relay makes task runners reach MongoDB through the node's
// connections: default true, except when a Disbatch file names a separate
// task_runner user: then runners keep connecting as that user unless
// runner.relay is set to true.
type Config struct {
	den.Config
	// MongoURI locates the Disbatch database (den.Config.Database names
	// it).
	MongoURI  string
	LogLevel  string
	LogFormat string // auto, json or console
	// HTTPListen is the address of the node's HTTP endpoint (/metrics,
	// /healthz, /readyz), such as 127.0.0.1:9187; empty (the default)
	// means no endpoint.
	HTTPListen string
	// HTTPWeb serves the web status page (den web, read-only unless
	// web.token is set) on the node's HTTP endpoint too, at /.
	HTTPWeb bool
	// Command is the command plugin's policy (off by default); it is the
	// Disbatch::Plugin::Command section of den.Config.PluginConfig.
	Command command.Policy
	// WebListen is the address den web serves on (default
	// 127.0.0.1:8080: this machine only). WebToken, when set, enables the
	// web page's actions (cancel, retry, maxthreads) for whoever presents
	// it; empty means the page is read-only.
	WebListen string
	WebToken  string
	// WebHosts are further names the web page answers to (web.hosts:
	// host, or host:port for that port only), such as the name a reverse
	// proxy passes on in Host; the page answers its listen address,
	// localhost and, listening beyond loopback, the hostname by itself,
	// and 421 to any other name.
	WebHosts []string
	// WebDCIListen is the address den web serves Disbatch's web API on
	// (web.dci_listen, --dci-listen), at the root of its own address;
	// empty (the default): not served. WebDCIPlugins are plugins the API
	// accepts besides those live den nodes serve (web.dci_plugins; a
	// Disbatch config.json's plugins).
	WebDCIListen  string
	WebDCIPlugins []string
	// WebCountsAge is how old the task counts den web's pages, the DCI's
	// queue list, den status and den queue list show may be
	// (web.counts_age): older, the one that looks counts every task again
	// (queue.CensusTaker), once for all viewers. 0: every view counts.
	WebCountsAge time.Duration
	// Plugins holds the sections of the file's plugins key: each plugin's
	// settings, as JSON, by plugin name exactly as written (for example
	// "MyCorp::Plugin::Resize"). Only den's YAML file has them; the
	// environment and flags do not set them.
	Plugins map[string]json.RawMessage
	// File is the configuration file that was read, if any.
	File string
	// Warnings are problems that do not stop the node (keys of a Disbatch
	// file den does not know), for the caller to log.
	Warnings []string
}

// CommandPlugin is the plugin the command section configures.
const CommandPlugin = "Disbatch::Plugin::Command"

// pluginConfig is what a node passes each plugin as its section of the
// configuration (den.Config.PluginConfig): the plugins key's sections,
// and the command section for Disbatch::Plugin::Command.
func pluginConfig(sections map[string]json.RawMessage, policy command.Policy) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(sections)+1)
	for name, section := range sections {
		out[name] = section
	}
	command, err := json.Marshal(policy)
	if err != nil {
		panic(fmt.Sprintf("config: encode the command policy: %v", err)) // a struct of strings and bools
	}
	out[CommandPlugin] = command
	return out
}

// Keys of den's own file, with their defaults: the keys of den.Settings
// (a node's durations and numbers, whose defaults the node declares, so
// that a node built without this package (embedded) and one configured by
// it start from the same values), and the others.
var defaults = withSettings(map[string]any{
	"mongo.uri":             "",
	"mongo.database":        "disbatch",
	"node":                  "",
	"activequeues":          []string{},
	"ignorequeues":          []string{},
	"gfs":                   "",
	"log.level":             "info",
	"log.format":            "auto",
	"runner.log":            "",
	"runner.relay":          "", // true, false, or "" (unset: see Config)
	"cgroups":               "auto",
	"command.enabled":       false,
	"command.allow":         []string{},
	"command.shell":         false,
	"command.env":           []string{},
	"command.env_allow":     []string{},
	"command.landlock":      "required",
	"command.user":          "",
	"command.user_optional": false,
	"command.shared_tmp":    false,
	"command.shared_pids":   false,
	"command.tmp_mb":        int64(command.DefaultTmpMB),
	"command.memory_mb":     int64(command.DefaultMemoryMB),
	"command.cpu":           command.DefaultCPU,
	"command.network":       "all",
	"retention.action":      string(queue.RetireDelete),
	"retention.reports":     queue.ReportsKeep,
	"web.listen":            DefaultWebListen,
	"web.token":             "",
	"web.hosts":             []string{},
	"web.dci_listen":        "",
	"web.dci_plugins":       []string{},
	"web.counts_age":        "10s",
	"http.listen":           "",
	"http.web":              false,
	"plugins":               map[string]any{}, // read from the file as written, not through viper (see pluginSections)
})

// bounds is the range of every duration and number key of defaults: those
// of den.Settings, declared with the node's Config (den/config.go), and the
// command plugin's, declared here. A value outside is refused when the
// configuration loads, with an error that names the key, the value and the
// range. docs/configuration.md lists this table (TestBoundsTableInDocs
// keeps the two the same), TestEveryDurationAndNumberKeyHasBounds fails
// for a new key without one, and TestEveryDocumentedKeyHasOneHome for a
// key declared twice.
var bounds = withSettingBounds(ownBounds())

// ownBounds are the ranges of the keys that are not den.Settings: the
// command plugin's.
func ownBounds() map[string]bound {
	return map[string]bound{
		// A task's temporary directory, a tmpfs (memory): 0 puts it on the
		// node's disk, unbounded; 16 TiB as resources.memory_mb.
		"command.tmp_mb": counts(0, 1<<24, "MiB"),
		// A command task's memory: 0 is no limit of den's; 16 TiB as
		// resources.memory_mb.
		"command.memory_mb": counts(0, 1<<24, "MiB"),
		// A command task's CPUs: 0 is no limit of den's; Linux's largest
		// NR_CPUS, as resources.cpus (command.Policy.Validate refuses
		// what is under command.MinCPU but 0).
		"command.cpu": {kind: kindNumber, min: 0, max: command.MaxCPU, unit: "cores"},
		// 0 counts at every view; an hour is as stale as counts may
		// usefully be.
		"web.counts_age": {kind: kindDuration, min: 0, max: float64(time.Hour)},
	}
}

// withSettings adds the keys of den.Settings to defaults, each default
// written as the file writes it: a duration as text (1s, 5m0s), a count
// as a whole number, a number as a float.
func withSettings(defaults map[string]any) map[string]any {
	for _, s := range den.Settings() {
		if _, ok := defaults[s.Key]; ok {
			panic("config: " + s.Key + " has two defaults") // one home per key
		}
		defaults[s.Key] = settingValue(s, s.Default)
	}
	return defaults
}

// withSettingBounds adds the ranges of den.Settings to bounds.
func withSettingBounds(bounds map[string]bound) map[string]bound {
	for _, s := range den.Settings() {
		if _, ok := bounds[s.Key]; ok {
			panic("config: " + s.Key + " has two ranges") // one home per key
		}
		bounds[s.Key] = bound{kind: s.Kind, min: s.Min, max: s.Max, unit: s.Unit}
	}
	return bounds
}

// settingValue is x, a value of s, as the file writes it and `den config
// print` shows it.
func settingValue(s den.Setting, x float64) any {
	switch s.Kind {
	case den.KindDuration:
		return time.Duration(x).String()
	case den.KindCount:
		return int64(x)
	}
	return x
}

// MaxNodeNameLength is the longest node name accepted, in bytes: room for
// any DNS name (253), which is what a node is usually called.
const MaxNodeNameLength = 255

// DefaultWebListen is where den web serves unless configured: this
// machine only.
const DefaultWebListen = "127.0.0.1:8080"

// AddFlags defines the flags that override the file and environment.
func AddFlags(fs *pflag.FlagSet) {
	fs.StringP("config", "c", "", "configuration file: den YAML, or a Disbatch config.json")
	fs.String("mongo-uri", "", "MongoDB URI (env DEN_MONGO_URI)")
	fs.String("database", "", "database name (env DEN_DATABASE; default disbatch)")
	fs.String("node", "", "node name (env DEN_NODE; default the hostname)")
	fs.String("gfs", "", "task output storage: true, false or auto")
	fs.Duration("interval", 0, "time between passes of the node loop (default 1s)")
	fs.StringSlice("activequeues", nil, "serve only these queues (ids or names)")
	fs.StringSlice("ignorequeues", nil, "serve all queues but these (ids or names)")
	fs.String("log-level", "", "debug, info, warn or error")
	fs.String("log-format", "", "auto (console on a terminal, else JSON), json or console")
	fs.String("http-listen", "", "address of the HTTP endpoint for /metrics, /healthz, /readyz, such as 127.0.0.1:9187 (env DEN_HTTP_LISTEN; default none)")
}

var flagKeys = map[string]string{
	"mongo-uri": "mongo.uri", "database": "mongo.database", "node": "node", "gfs": "gfs",
	"interval": "interval", "activequeues": "activequeues", "ignorequeues": "ignorequeues",
	"log-level": "log.level", "log-format": "log.format", "http-listen": "http.listen",
}

// Load reads the configuration: defaults, then the file (path, or the
// --config flag when path is empty), then the environment, then the flags
// that were set. fs may be nil. Errors name the file and the problem.
func Load(path string, fs *pflag.FlagSet) (Config, error) {
	v := viper.New()
	for k, d := range defaults {
		v.SetDefault(k, d)
	}
	if path == "" && fs != nil {
		path, _ = fs.GetString("config")
	}
	var file fileSettings
	if path != "" {
		var err error
		if file, err = readFile(v, path); err != nil {
			return Config{}, err
		}
	}
	v.SetEnvPrefix("DEN")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	v.BindEnv("mongo.database", "DEN_DATABASE", "DEN_MONGO_DATABASE")
	if fs != nil {
		for flag, key := range flagKeys {
			if f := fs.Lookup(flag); f != nil && f.Changed {
				v.BindPFlag(key, f)
			}
		}
	}
	// The file's task_runner user belongs to the file's own URI: not to a
	// URI given in the environment or on the command line.
	runnerUser := file.runnerUser
	if runnerUser != nil && v.GetString("mongo.uri") != file.uri {
		runnerUser = nil
	}
	c, err := build(v, path, runnerUser, uriSource(v, fs, file))
	c.Warnings = append(file.warnings, envWarnings()...)
	c.Plugins = file.sections
	if err == nil {
		c.PluginConfig = pluginConfig(c.Plugins, c.Command)
	}
	return c, err
}

// uriSource names where the MongoDB URI came from, for its errors: the
// flag, the variable, or the file's key.
func uriSource(v *viper.Viper, fs *pflag.FlagSet, file fileSettings) string {
	if fs != nil {
		if f := fs.Lookup("mongo-uri"); f != nil && f.Changed {
			return "--mongo-uri"
		}
	}
	if os.Getenv("DEN_MONGO_URI") != "" {
		return "DEN_MONGO_URI"
	}
	if file.uri != "" && v.GetString("mongo.uri") == file.uri {
		return "mongohost"
	}
	return "mongo.uri"
}

// build makes the Config of what v holds, checking every value; path
// (for errors) is the file read, if any, runnerUser the task_runner
// credentials of a Disbatch file for its URI, and uriFrom where the URI
// came from. Of two bad keys, it names the same one each time.
func build(v *viper.Viper, path string, runnerUser *url.Userinfo, uriFrom string) (Config, error) {
	c, err := buildNode(v, path, runnerUser)
	if err == nil {
		err = readServices(v, &c)
	}
	if err == nil {
		err = readLast(v, &c, runnerUser, uriFrom)
	}
	if err != nil {
		if path != "" {
			return Config{}, fmt.Errorf("configuration (file %s, environment, flags): %s", path, err)
		}
		return Config{}, fmt.Errorf("configuration: %s", err)
	}
	return c, nil
}

// textKeys are read as text: a number is taken as written, a list or a
// map there is a mistake, never a default.
var textKeys = []string{"mongo.uri", "mongo.database", "node", "gfs", "log.level", "log.format", "runner.log", "cgroups", "web.listen", "web.token", "web.dci_listen", "http.listen", "retention.action", "retention.reports"}

// checkTypes refuses a value of the wrong type in a text or list key.
func checkTypes(v *viper.Viper) error {
	for _, key := range textKeys {
		switch x := v.Get(key).(type) {
		case nil, string, int, int64, uint64, float64:
		case bool:
			if key != "gfs" {
				return fmt.Errorf("%s must be text, not %v", key, x)
			}
		default:
			return fmt.Errorf("%s must be a single value, not %v (%T)", key, x, x)
		}
	}
	for _, key := range []string{"activequeues", "ignorequeues", "web.hosts", "web.dci_plugins"} {
		if _, err := strictList(v, key); err != nil {
			return err
		}
	}
	return nil
}

// buildNode reads the keys of what the node runs with: the name, the
// queues, and every key of den.Settings, then the retention's action and
// reports and cgroups.
func buildNode(v *viper.Viper, path string, runnerUser *url.Userinfo) (Config, error) {
	if err := checkTypes(v); err != nil {
		return Config{}, err
	}
	c := Config{
		Config: den.Config{
			Name:         strings.TrimSpace(v.GetString("node")),
			Database:     strings.TrimSpace(v.GetString("mongo.database")),
			ActiveQueues: list(v.Get("activequeues")),
			IgnoreQueues: list(v.Get("ignorequeues")),
			Runner:       den.RunnerCommand{Log: v.GetString("runner.log")},
			Retention:    queue.Retention{Keep: map[string]time.Duration{}},
		},
		MongoURI:  strings.TrimSpace(v.GetString("mongo.uri")),
		LogLevel:  strings.ToLower(v.GetString("log.level")),
		LogFormat: strings.ToLower(v.GetString("log.format")),
		File:      path,
	}
	if err := ValidNodeName(c.Name); err != nil {
		return c, err
	}
	for _, s := range den.Settings() {
		x, err := readSetting(v, s)
		if err != nil {
			return c, err
		}
		s.Set(&c.Config, x)
	}
	var err error
	if c.Retention.Action, c.Retention.Reports, err = retirement(v); err != nil {
		return c, err
	}
	c.Cgroups = strings.ToLower(v.GetString("cgroups"))
	if !slices.Contains([]string{"auto", "on", "off"}, c.Cgroups) {
		return c, fmt.Errorf("cgroups %q must be auto, on or off", v.GetString("cgroups"))
	}
	return c, nil
}

// readSetting reads a key of den.Settings and checks it against its range
// (and, for a retention, its least value besides 0).
func readSetting(v *viper.Viper, s den.Setting) (float64, error) {
	switch s.Kind {
	case den.KindDuration:
		d, err := boundedDuration(v, s.Key)
		if err == nil && s.Least > 0 && d > 0 && d < time.Duration(s.Least) {
			err = fmt.Errorf("%s %s is below %s: write 0 to keep everything, or a time such as 168h", s.Key, formatDuration(d), formatDuration(time.Duration(s.Least)))
		}
		return float64(d), err
	case den.KindCount:
		n, err := boundedCount(v, s.Key)
		return float64(n), err
	}
	return boundedNumber(v, s.Key)
}

// readServices reads what den's commands around the node use: den web's
// keys, the HTTP endpoint, how runners reach MongoDB, the command plugin.
func readServices(v *viper.Viper, c *Config) error {
	var err error
	c.WebListen = strings.TrimSpace(v.GetString("web.listen"))
	if _, _, err := net.SplitHostPort(c.WebListen); err != nil {
		return fmt.Errorf("web.listen %q must be host:port, such as 127.0.0.1:8080", c.WebListen)
	}
	c.WebToken = strings.TrimSpace(v.GetString("web.token"))
	if c.WebToken != "" {
		if err := checkWebToken(c.WebToken); err != nil {
			return err
		}
	}
	c.WebHosts = list(v.Get("web.hosts"))
	if c.WebDCIListen, err = dciListen(v.GetString("web.dci_listen")); err != nil {
		return err
	}
	c.WebDCIPlugins = list(v.Get("web.dci_plugins"))
	if c.WebCountsAge, err = boundedDuration(v, "web.counts_age"); err != nil {
		return err
	}
	if c.HTTPListen, err = listenAddress(v.GetString("http.listen")); err != nil {
		return err
	}
	if c.HTTPWeb, err = boolean(v, "http.web"); err != nil {
		return err
	}
	return nil
}

// readLast reads, in this order, runner.relay, the command plugin's
// policy, gfs, the log, the database name and the MongoDB URI.
func readLast(v *viper.Viper, c *Config, runnerUser *url.Userinfo, uriFrom string) error {
	relay := runnerUser == nil
	if x, ok := v.Get("runner.relay").(string); !ok || x != "" {
		var err error
		if relay, err = boolean(v, "runner.relay"); err != nil {
			return err
		}
	}
	c.Runner.Direct = !relay
	if err := readCommand(v, c); err != nil {
		return err
	}
	if g := v.GetString("gfs"); g != "" {
		var err error
		if c.GFS, err = queue.NormalizeGFS(g); err != nil {
			return err
		}
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel) {
		return fmt.Errorf("log.level %q must be debug, info, warn or error", c.LogLevel)
	}
	if !slices.Contains([]string{"auto", "json", "console"}, c.LogFormat) {
		return fmt.Errorf("log.format %q must be auto, json or console", c.LogFormat)
	}
	if err := ValidDatabase(c.Database); err != nil {
		return err
	}
	return readMongoURI(c, runnerUser, uriFrom)
}

// readCommand reads the command plugin's policy: one that is enabled
// allows some executable or directory, each an absolute path.
func readCommand(v *viper.Viper, c *Config) error {
	var err error
	if c.Command, err = commandPolicy(v); err != nil {
		return err
	}
	if c.Command.Enabled && len(c.Command.Allow) == 0 {
		return errors.New("command.enabled is true but command.allow lists no executable or directory")
	}
	for _, a := range c.Command.Allow {
		if !filepath.IsAbs(a) {
			return fmt.Errorf("command.allow entry %q must be an absolute path", a)
		}
	}
	return nil
}

// readMongoURI checks the MongoDB URI, if any, and gives runners the same
// one, with the task_runner credentials of a Disbatch file when it has
// them (den.Config.URI).
func readMongoURI(c *Config, runnerUser *url.Userinfo, uriFrom string) error {
	if c.MongoURI == "" {
		return nil
	}
	if err := checkMongoURI(c.MongoURI, uriFrom); err != nil {
		return err
	}
	c.URI = c.MongoURI
	if runnerUser != nil {
		u, err := url.Parse(c.MongoURI)
		if err != nil {
			return fmt.Errorf("%s %q: %v", uriFrom, redact(c.MongoURI), scrub(err.Error(), c.MongoURI))
		}
		u.User = runnerUser
		c.URI = u.String()
	}
	return nil
}

// dciListen checks web.dci_listen: empty (not served) or host:port.
func dciListen(a string) (string, error) {
	a = strings.TrimSpace(a)
	if a == "" {
		return "", nil
	}
	if _, _, err := net.SplitHostPort(a); err != nil {
		return "", fmt.Errorf("web.dci_listen %q must be host:port, such as 127.0.0.1:8081", a)
	}
	return a, nil
}

// listenAddress checks http.listen: empty (no endpoint) or host:port. A
// host left out (":9187") listens on every interface, so it is refused:
// the endpoint listens beyond localhost only when an address says so
// (0.0.0.0:9187).
func listenAddress(a string) (string, error) {
	a = strings.TrimSpace(a)
	if a == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return "", fmt.Errorf("http.listen %q must be host:port, such as 127.0.0.1:9187", a)
	}
	if host == "" {
		return "", fmt.Errorf("http.listen %q has no host: write 127.0.0.1%s for this machine only, or 0.0.0.0%s to listen on every interface", a, a, a)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("http.listen %q: port %q must be a number from 0 to 65535", a, port)
	}
	return a, nil
}

func duration(v *viper.Viper, key string) (time.Duration, error) {
	switch d := v.Get(key).(type) {
	case time.Duration:
		return d, nil
	case int, int64, uint64, float64:
		// A bare number is seconds, as in Disbatch's own settings.
		s := v.GetFloat64(key)
		if !finite(s) || math.Abs(s) > math.MaxInt64/float64(time.Second) {
			return 0, fmt.Errorf("%s %v is beyond any duration", key, s)
		}
		return time.Duration(s * float64(time.Second)), nil
	}
	return time.ParseDuration(v.GetString(key))
}

// retirement reads retention.action and retention.reports; the
// retention times are keys of den.Settings.
func retirement(v *viper.Viper) (queue.RetireMode, string, error) {
	a := queue.RetireMode(strings.ToLower(strings.TrimSpace(v.GetString("retention.action"))))
	if a != queue.RetireDelete && a != queue.RetireArchive {
		return "", "", fmt.Errorf("retention.action %q must be delete or archive", v.GetString("retention.action"))
	}
	rep := strings.ToLower(strings.TrimSpace(v.GetString("retention.reports")))
	if rep != queue.ReportsKeep && rep != queue.ReportsDelete {
		return "", "", fmt.Errorf("retention.reports %q must be keep or delete", v.GetString("retention.reports"))
	}
	return a, rep, nil
}

// commandPolicy reads the command section, refusing values of the wrong
// type: a typo such as enabled: "yes" or allow: 5 is an error, not a
// default. (The plugin checks the values themselves.)
func commandPolicy(v *viper.Viper) (command.Policy, error) {
	var p command.Policy
	var err error
	if p.Enabled, err = boolean(v, "command.enabled"); err != nil {
		return p, err
	}
	if p.Shell, err = boolean(v, "command.shell"); err != nil {
		return p, err
	}
	for key, dst := range map[string]*[]string{"command.allow": &p.Allow, "command.env": &p.Env, "command.env_allow": &p.EnvAllow} {
		if *dst, err = strictList(v, key); err != nil {
			return p, err
		}
	}
	ll, ok := v.Get("command.landlock").(string)
	if !ok {
		return p, fmt.Errorf("command.landlock must be required or optional, not %v", v.Get("command.landlock"))
	}
	p.Landlock = strings.ToLower(strings.TrimSpace(ll))
	if p.Landlock != command.LandlockRequired && p.Landlock != command.LandlockOptional {
		return p, fmt.Errorf("command.landlock %q must be required or optional", ll)
	}
	switch u := v.Get("command.user").(type) {
	case string:
		p.User = strings.TrimSpace(u)
	case int, int64, uint64:
		return p, fmt.Errorf("command.user %v must be a user name or uid:gid (quoted in YAML: \"%v:GID\")", u, u)
	default:
		return p, fmt.Errorf("command.user must be a user name or uid:gid, not %v", u)
	}
	if p.UserOptional, err = boolean(v, "command.user_optional"); err != nil {
		return p, err
	}
	if p.SharedTmp, err = boolean(v, "command.shared_tmp"); err != nil {
		return p, err
	}
	if p.SharedPIDs, err = boolean(v, "command.shared_pids"); err != nil {
		return p, err
	}
	if p.TmpMB, err = boundedCount(v, "command.tmp_mb"); err != nil {
		return p, err
	}
	if p.MemoryMB, err = boundedCount(v, "command.memory_mb"); err != nil {
		return p, err
	}
	if p.CPU, err = boundedNumber(v, "command.cpu"); err != nil {
		return p, err
	}
	if p.Network, err = network(v.Get("command.network")); err != nil {
		return p, err
	}
	return p, p.Validate()
}

// network reads command.network: all, none, or a list of TCP ports (in
// YAML a list of numbers; from the environment, numbers separated by
// commas).
func network(raw any) (command.Network, error) {
	var n command.Network
	var js []byte
	switch x := raw.(type) {
	case string:
		x = strings.TrimSpace(x)
		if x == "" || x == "all" || x == "none" {
			js, _ = json.Marshal(x)
			break
		}
		var ports []json.Number
		for _, f := range strings.Split(x, ",") {
			f = strings.TrimSpace(f)
			if _, err := strconv.ParseUint(f, 10, 16); err != nil {
				return n, fmt.Errorf("command.network %q must be all, none or a list of TCP ports", x)
			}
			ports = append(ports, json.Number(f))
		}
		js, _ = json.Marshal(ports)
	case []any:
		for _, p := range x {
			switch p.(type) {
			case int, int64, uint64:
			default:
				return n, fmt.Errorf("command.network entry %v must be a TCP port number", p)
			}
		}
		js, _ = json.Marshal(x)
	default:
		return n, fmt.Errorf("command.network must be all, none or a list of TCP ports, not %v", raw)
	}
	if err := json.Unmarshal(js, &n); err != nil {
		return n, err
	}
	return n, nil
}

// boolean reads a true/false key: a YAML boolean, or "true"/"false" from
// the environment.
func boolean(v *viper.Viper, key string) (bool, error) {
	switch b := v.Get(key).(type) {
	case bool:
		return b, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(b)) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	return false, fmt.Errorf("%s must be true or false, not %v", key, v.Get(key))
}

// strictList reads a list of strings: a YAML array of strings, or a
// comma-separated string (from the environment).
func strictList(v *viper.Viper, key string) ([]string, error) {
	switch x := v.Get(key).(type) {
	case []any:
		for _, e := range x {
			if _, ok := e.(string); !ok {
				return nil, fmt.Errorf("%s must be a list of strings; %v is not a string", key, e)
			}
		}
	case []string, string, nil:
	default:
		return nil, fmt.Errorf("%s must be a list of strings, not %v", key, x)
	}
	return list(v.Get(key)), nil
}

// number reads a number, or a number written as text; NaN and the
// infinities are not numbers here.
func number(x any) (float64, bool) {
	switch n := x.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float64:
		return n, finite(n)
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		return f, err == nil && finite(f)
	}
	return 0, false
}

// count reads a whole number: a YAML integer, or digits from the
// environment.
func count(v *viper.Viper, key string) (int64, error) {
	switch n := v.Get(key).(type) {
	case int:
		return int64(n), nil
	case int64:
		return n, nil
	case uint64:
		if n <= math.MaxInt64 {
			return int64(n), nil
		}
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), nil
		}
	case string:
		return strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	}
	return 0, fmt.Errorf("%s must be a whole number, not %v", key, v.Get(key))
}

// list reads a list written as an array, or as a comma-separated string
// (from the environment).
func list(val any) []string {
	var out []string
	switch x := val.(type) {
	case []string:
		out = x
	case []any:
		for _, e := range x {
			out = append(out, fmt.Sprint(e))
		}
	case string:
		out = strings.Split(x, ",")
	}
	res := []string{}
	for _, s := range out {
		if s = strings.TrimSpace(s); s != "" {
			res = append(res, s)
		}
	}
	return res
}

// fileSettings is what a configuration file gives besides the keys it
// loads into viper.
type fileSettings struct {
	// runnerUser is the credentials task runners should use, when a
	// Disbatch file names them, for uri, the file's MongoDB URI.
	runnerUser *url.Userinfo
	uri        string
	sections   map[string]json.RawMessage // the plugins' sections (den's YAML)
	warnings   []string
}

// readFile loads a configuration file into v, and returns what else the
// file gives.
func readFile(v *viper.Viper, path string) (fileSettings, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return fileSettings{}, fmt.Errorf("configuration file: %w", err)
	}
	isJSON := strings.EqualFold(filepath.Ext(path), ".json") || bytes.Contains(src, []byte(`"mongohost"`))
	if !isJSON {
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(src)); err != nil {
			return fileSettings{}, fmt.Errorf("configuration file %s: %w", path, err)
		}
		var unknown []string
		for _, k := range v.AllKeys() {
			if _, ok := defaults[k]; !ok && v.InConfig(k) && !strings.HasPrefix(k, "plugins.") {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return fileSettings{}, fmt.Errorf("configuration file %s: unknown keys %s (known: %s)", path, strings.Join(unknown, ", "), strings.Join(knownKeys(), ", "))
		}
		if err := fileLists(v); err != nil {
			return fileSettings{}, fmt.Errorf("configuration file %s: %w", path, err)
		}
		sections, err := pluginSections(src)
		if err != nil {
			return fileSettings{}, fmt.Errorf("configuration file %s: %w", path, err)
		}
		return fileSettings{sections: sections}, nil
	}
	m, err := parseRelaxedJSON(src)
	if err != nil {
		return fileSettings{}, fmt.Errorf("configuration file %s: %w", path, err)
	}
	ours, runnerUser, unknown, err := fromDisbatch(m)
	if err != nil {
		return fileSettings{}, fmt.Errorf("configuration file %s: %w", path, err)
	}
	if err := v.MergeConfigMap(ours); err != nil {
		return fileSettings{}, fmt.Errorf("configuration file %s: %w", path, err)
	}
	f := fileSettings{runnerUser: runnerUser, uri: ours["mongo"].(map[string]any)["uri"].(string)}
	if len(unknown) > 0 {
		f.warnings = append(f.warnings, fmt.Sprintf("configuration file %s: ignoring keys den does not use: %s", path, strings.Join(unknown, ", ")))
	}
	return f, nil
}

// fileLists refuses a key whose value is a list (its default is one) that
// den's file gives as anything but a YAML list of strings: on main,
// command.allow: "/usr/bin/python3" was taken as a one-entry list, and
// activequeues: "a,b" as two queues. Only the environment writes a list
// as one string, its entries separated by commas
// (DEN_COMMAND_ALLOW=/usr/bin/python3,/usr/bin/perl). An entry that is
// empty is refused too. command.network, which is all, none or a list of
// ports, takes no other string in the file.
func fileLists(v *viper.Viper) error {
	for _, key := range knownKeys() {
		if _, isList := defaults[key].([]string); !isList || !v.InConfig(key) {
			continue
		}
		switch x := v.Get(key).(type) {
		case nil, []string: // key: with nothing is an empty list
		case []any:
			for i, e := range x {
				if s, ok := e.(string); !ok {
					return fmt.Errorf("%s must be a list of strings; its entry %d is %s", key, i+1, describe(e))
				} else if strings.TrimSpace(s) == "" {
					return fmt.Errorf("%s must be a list of strings; its entry %d is empty", key, i+1)
				}
			}
		case string:
			return fmt.Errorf("%s must be a list of strings, not %s: in the file a list is written [%s] (one string separated by commas is the environment's form)",
				key, describe(x), shorten(strings.Join(list(x), ", ")))
		default:
			return fmt.Errorf("%s must be a list of strings, not %s", key, describe(x))
		}
	}
	if v.InConfig("command.network") {
		if s, ok := v.Get("command.network").(string); ok && !slices.Contains([]string{"", "all", "none"}, strings.TrimSpace(s)) {
			return fmt.Errorf("command.network %q must be all, none or a list of TCP ports; in the file a list is written [%s] (one string separated by commas is the environment's form)",
				shorten(s), shorten(strings.Join(list(s), ", ")))
		}
	}
	return nil
}

// shorten cuts s to 40 characters for an error message.
func shorten(s string) string {
	if r := []rune(s); len(r) > 40 {
		return string(r[:37]) + "..."
	}
	return s
}

// pluginSections reads the plugins key of den's YAML file: a mapping from
// plugin name to that plugin's settings (a mapping, or nothing). It reads
// the YAML itself, not through viper, which lowercases keys and splits
// them at dots: plugin names and their settings are kept as written.
func pluginSections(src []byte) (map[string]json.RawMessage, error) {
	var file struct {
		Plugins yaml.Node `yaml:"plugins"`
	}
	if err := yaml.Unmarshal(src, &file); err != nil {
		return nil, err
	}
	n := &file.Plugins
	if n.Kind == 0 || n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("plugins (line %d) must map plugin names to their settings, such as plugins: {MyCorp::Plugin::Resize: {quality: 80}}", n.Line)
	}
	out := map[string]json.RawMessage{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		name := key.Value
		switch {
		case key.Kind != yaml.ScalarNode || strings.TrimSpace(name) == "":
			return nil, fmt.Errorf("plugins (line %d): a plugin name must be text", key.Line)
		case name == CommandPlugin:
			return nil, fmt.Errorf("plugins.%s (line %d): the command plugin is configured under command:, not in plugins", name, key.Line)
		case val.Tag == "!!null":
			continue
		case val.Kind != yaml.MappingNode:
			return nil, fmt.Errorf("plugins.%s (line %d): the settings must be a mapping of keys to values", name, val.Line)
		}
		var section map[string]any
		if err := val.Decode(&section); err != nil {
			return nil, fmt.Errorf("plugins.%s (line %d): %w", name, val.Line, err)
		}
		b, err := json.Marshal(section)
		if err != nil {
			return nil, fmt.Errorf("plugins.%s (line %d): settings cannot be passed on as JSON: %w", name, val.Line, err)
		}
		out[name] = b
	}
	return out, nil
}

func knownKeys() []string {
	keys := make([]string, 0, len(defaults))
	for k := range defaults {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ValidDatabase checks a MongoDB database name: not empty, under 64 bytes,
// none of the characters MongoDB refuses (/\. "$*<>:|? and NUL).
func ValidDatabase(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("database name is empty")
	case len(name) >= 64:
		return fmt.Errorf("database name %q is %d bytes; MongoDB allows at most 63", name, len(name))
	case strings.ContainsAny(name, "/\\. \"$*<>:|?\x00"):
		return fmt.Errorf("database name %q contains a character MongoDB refuses in database names (one of /\\. \"$*<>:|?)", name)
	}
	return nil
}
