package config

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/den-project/den/den"
	"github.com/den-project/den/plugins/command"
)

// Setting is one key of the effective configuration, with where its value
// came from.
type Setting struct {
	Key    string `json:"key"`
	Value  any    `json:"value"`
	Source string `json:"source"` // default, file PATH, environment NAME, flag --NAME
}

// Explain loads the configuration as Load does and says, for every key,
// its effective value and which layer set it (the highest that did).
// Passwords in URIs are redacted.
func Explain(path string, fs *pflag.FlagSet) ([]Setting, Config, error) {
	c, err := Load(path, fs)
	if err != nil {
		return nil, c, err
	}
	if path == "" && fs != nil {
		path, _ = fs.GetString("config")
	}
	inFile := viper.New()
	if path != "" {
		if _, err := readFile(inFile, path); err != nil {
			return nil, c, err
		}
	}
	flagOf := map[string]string{}
	if fs != nil {
		for flag, key := range flagKeys {
			if f := fs.Lookup(flag); f != nil && f.Changed {
				flagOf[key] = flag
			}
		}
	}
	values := effective(c)
	var out []Setting
	for key := range defaults {
		s := Setting{Key: key, Value: values[key], Source: "default"}
		if _, ok := values[key]; !ok {
			s.Value = defaults[key]
		}
		switch {
		case flagOf[key] != "":
			s.Source = "flag --" + flagOf[key]
		case envOf(key) != "":
			s.Source = "environment " + envOf(key)
		case path != "" && inFile.InConfig(key):
			s.Source = "file " + path
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, c, nil
}

// envOf is the environment variable that sets key, or "".
func envOf(key string) string {
	if key == "plugins" { // the file's alone: DEN_PLUGINS sets nothing
		return ""
	}
	names := []string{"DEN_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))}
	if key == "mongo.database" {
		names = []string{"DEN_DATABASE", "DEN_MONGO_DATABASE"}
	}
	for _, n := range names {
		if _, ok := os.LookupEnv(n); ok {
			return n
		}
	}
	return ""
}

// effective is the loaded configuration by key, as the node uses it.
func effective(c Config) map[string]any {
	out := map[string]any{
		"mongo.uri":             redact(c.MongoURI),
		"mongo.database":        c.Database,
		"node":                  c.Name,
		"activequeues":          c.ActiveQueues,
		"ignorequeues":          c.IgnoreQueues,
		"gfs":                   c.GFS,
		"log.level":             c.LogLevel,
		"log.format":            c.LogFormat,
		"runner.log":            c.Runner.Log,
		"cgroups":               c.Cgroups,
		"command.enabled":       c.Command.Enabled,
		"command.allow":         c.Command.Allow,
		"command.shell":         c.Command.Shell,
		"command.env":           c.Command.Env,
		"command.env_allow":     c.Command.EnvAllow,
		"command.landlock":      c.Command.Landlock,
		"command.user":          c.Command.User,
		"command.user_optional": c.Command.UserOptional,
		"command.shared_tmp":    c.Command.SharedTmp,
		"command.shared_pids":   c.Command.SharedPIDs,
		"command.tmp_mb":        c.Command.TmpMB,
		"command.memory_mb":     c.Command.MemoryMB,
		"command.cpu":           c.Command.CPU,
		"command.network":       networkValue(c.Command.Network),
		"web.listen":            c.WebListen,
		"web.token":             redactToken(c.WebToken),
		"web.hosts":             c.WebHosts,
		"web.dci_listen":        c.WebDCIListen,
		"web.dci_plugins":       c.WebDCIPlugins,
		"web.counts_age":        formatDuration(c.WebCountsAge),
		"http.listen":           c.HTTPListen,
		"http.web":              c.HTTPWeb,
		"plugins":               pluginValues(c.Plugins),
	}
	for _, s := range den.Settings() {
		out[s.Key] = settingValue(s, s.Get(&c.Config))
	}
	return out
}

// pluginValues decodes the plugins' sections for display.
func pluginValues(sections map[string]json.RawMessage) map[string]any {
	out := map[string]any{}
	for name, raw := range sections {
		var v any
		if json.Unmarshal(raw, &v) == nil {
			out[name] = v
		}
	}
	return out
}

// String renders a setting's value for a table.
func (s Setting) String() string {
	switch v := s.Value.(type) {
	case []string:
		return "[" + strings.Join(v, ", ") + "]"
	case string:
		if v == "" {
			return `""`
		}
		return v
	}
	return fmt.Sprint(s.Value)
}

// redactToken shows whether a secret is set, never its value.
func redactToken(s string) string {
	if s == "" {
		return ""
	}
	return "(set, hidden)"
}

// networkValue is command.network as the configuration file writes it.
func networkValue(n command.Network) any {
	if n.None || n.Ports == nil {
		return n.String()
	}
	ports := make([]int, len(n.Ports))
	for i, p := range n.Ports {
		ports[i] = int(p)
	}
	return ports
}
