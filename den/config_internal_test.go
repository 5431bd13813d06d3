package den

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/internal/claim"
	"github.com/den-project/den/den/internal/resources"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/queue"
)

// WithDefaults sets each zero field to its default, and nothing else: a
// value given, even one out of every range, is kept for validate to judge.
func TestWithDefaults(t *testing.T) {
	t.Parallel()
	got := Config{}.WithDefaults()
	for _, tc := range []struct {
		field     string
		got, want any
	}{
		{"Interval", got.Interval, DefaultInterval},
		{"OrphanAge", got.OrphanAge, queue.DefaultOrphanAge},
		{"MaxTermination", got.MaxTermination, queue.DefaultGrace},
		{"DeadNodeAfter", got.DeadNodeAfter, queue.DefaultDeadNodeAfter},
		{"Runner.Idle", got.Runner.Idle, DefaultRunnerIdle},
		{"Runner.MaxTasks", got.Runner.MaxTasks, DefaultRunnerMaxTasks},
		{"Runner.MaxProcesses", got.Runner.MaxProcesses, DefaultRunnerMaxProcesses},
		{"MaxOutput", got.MaxOutput, int64(runner.DefaultMaxOutput)},
		{"Resources.BusyCorePercent", got.Resources.BusyCorePercent, float64(claim.DefaultBusyCorePercent)},
		{"Resources.MemoryMB", got.Resources.MemoryMB, 0.0}, // 0: the machine's
		{"Retention.Keep", len(got.Retention.Keep), 0},      // 0: keep everything
		{"SweepEvery", got.SweepEvery, DefaultSweepEvery},
		{"RefreshEvery", got.RefreshEvery, DefaultRefreshEvery},
		{"ClockEvery", got.ClockEvery, DefaultClockEvery},
		{"ProbeEvery", got.ProbeEvery, DefaultProbeEvery},
		{"RescueEvery", got.RescueEvery, DefaultRescueEvery},
		{"RetentionEvery", got.RetentionEvery, DefaultRetentionEvery},
		{"ResourcesEvery", got.ResourcesEvery, resources.DefaultEvery},
		{"Name", got.Name, ""}, // New's: the hostname
	} {
		if tc.got != tc.want {
			t.Errorf("zero %s became %v, want the default %v", tc.field, tc.got, tc.want)
		}
	}
	if got.Metrics == nil || got.Version == "" {
		t.Errorf("no default metrics (%v) or version (%q)", got.Metrics, got.Version)
	}
	set := Config{Interval: time.Hour, OrphanAge: -time.Second, Runner: RunnerCommand{MaxTasks: 1}, MaxOutput: 5}.WithDefaults()
	if set.Interval != time.Hour || set.OrphanAge != -time.Second || set.Runner.MaxTasks != 1 || set.MaxOutput != 5 {
		t.Errorf("values given were changed: interval %s, orphan age %s, max tasks %d, max output %d",
			set.Interval, set.OrphanAge, set.Runner.MaxTasks, set.MaxOutput)
	}
	if d := (Config{}).WithDefaults(); d.Retention.Keep != nil {
		t.Errorf("a default of 0 wrote a retention: %v", d.Retention.Keep)
	}
}

// forNode (what New runs a node with) fills the defaults and refuses what
// no node runs with, naming the field; it keeps an embedded node's values
// beyond the ranges den's configuration holds an operator to.
func TestForNodeBounds(t *testing.T) {
	t.Parallel()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/")) // never dialled
	if err != nil {
		t.Fatal(err)
	}
	db := client.Database("embedded")
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
		want  string // part of the error; "" when the node may run
		check func(Config) bool
	}{
		{"zero interval is the default", func(c *Config) {}, "", func(c Config) bool { return c.Interval == DefaultInterval && c.Database == "embedded" && c.Name != "" }},
		{"negative interval", func(c *Config) { c.Interval = -time.Second },
			"Interval (interval) is -1s; it may not be negative (0 means the default, 1s)", nil},
		{"interval of 1ns", func(c *Config) { c.Interval = time.Nanosecond }, "Interval is 1ns; it must be at least 100ms", nil},
		{"interval just below the floor", func(c *Config) { c.Interval = MinInterval - 1 }, "Interval is 99.999999ms; it must be at least 100ms", nil},
		{"interval at the floor", func(c *Config) { c.Interval = MinInterval }, "", func(c Config) bool { return c.Interval == MinInterval }},
		{"interval beyond the operator's 30s", func(c *Config) { c.Interval = time.Hour }, "", func(c Config) bool { return c.Interval == time.Hour }},
		{"a sweep every 10ms", func(c *Config) { c.SweepEvery = 10 * time.Millisecond }, "SweepEvery is 10ms; it must be at least 100ms", nil},
		{"negative probe", func(c *Config) { c.ProbeEvery = -time.Minute }, "ProbeEvery is -1m0s", nil},
		{"a lease of seconds", func(c *Config) { c.DeadNodeAfter, c.MaxTermination = 10*time.Second, 100*time.Millisecond }, "",
			func(c Config) bool {
				return c.DeadNodeAfter == 10*time.Second && c.MaxTermination == 100*time.Millisecond
			}},
		{"negative orphan age", func(c *Config) { c.OrphanAge = -time.Minute }, "OrphanAge (orphan_age) is -1m0s", nil},
		{"negative max tasks", func(c *Config) { c.Runner.MaxTasks = -1 }, "Runner.MaxTasks (runner.max_tasks) is -1; it may not be negative (0 means the default, 100)", nil},
		{"negative max processes", func(c *Config) { c.Runner.MaxProcesses = -1 }, "Runner.MaxProcesses (runner.max_processes) is -1", nil},
		{"negative max output", func(c *Config) { c.MaxOutput = -5 }, "MaxOutput (max_output) is -5", nil},
		{"negative cores", func(c *Config) { c.Resources.CPUs = -0.5 }, "Resources.CPUs (resources.cpus) is -0.5", nil},
		{"negative retention", func(c *Config) { c.Retention.Keep = map[string]time.Duration{queue.RetainFailed: -time.Hour} },
			`Retention.Keep["failed"] (retention.failed) is -1h0m0s`, nil},
		{"gfs that is none", func(c *Config) { c.GFS = "sometimes" }, "node gfs setting", nil},
		{"gfs normalised", func(c *Config) { c.GFS = "Yes" }, "", func(c Config) bool { return c.GFS == queue.GFSAlways }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Runner: RunnerCommand{Path: "/bin/true"}}
			tc.tweak(&c)
			got, err := c.forNode(db)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			case tc.check != nil && !tc.check(got):
				t.Errorf("ran with %+v", got)
			}
		})
	}
}

// Every timer validate holds to MinInterval has a default at least that,
// and every Setting's default is inside its range: WithDefaults never
// makes a configuration validate or den/config refuses.
func TestDefaultsInsideBounds(t *testing.T) {
	t.Parallel()
	c := Config{Name: "n", Database: "d"}.WithDefaults()
	if err := c.validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	for _, s := range Settings() {
		if s.Default < s.Min || s.Default > s.Max {
			t.Errorf("%s: default %s outside %s to %s", s.Key, s.format(s.Default), s.format(s.Min), s.format(s.Max))
		}
		if got := s.Get(&c); got != s.Default {
			t.Errorf("%s: WithDefaults gave %s, the table says %s", s.Key, s.format(got), s.format(s.Default))
		}
		var other Config
		s.Set(&other, s.Max)
		if got := s.Get(&other); got != s.Max || reflect.DeepEqual(other, Config{}) {
			t.Errorf("%s: set %s to %s, read back %s", s.Key, s.Field, s.format(s.Max), s.format(got))
		}
	}
}

// Each Setting's Field, what messages and docs name it by, is the field
// its typed accessor reaches, and each timer's name is its field: set
// through the accessor, the value shows at that path of Config and
// nowhere else. Reflection is the test's, never the node's.
func TestSettingsNameTheirFields(t *testing.T) {
	t.Parallel()
	fieldAt := func(c *Config, path string) reflect.Value {
		v := reflect.ValueOf(c).Elem()
		for _, name := range strings.Split(path, ".") {
			name, index, isMap := strings.Cut(strings.TrimSuffix(name, "]"), "[")
			if v = v.FieldByName(name); !v.IsValid() {
				t.Fatalf("Config has no field %s", path)
			}
			if isMap {
				k, _ := strconv.Unquote(index)
				if v = v.MapIndex(reflect.ValueOf(k)); !v.IsValid() {
					return reflect.Value{}
				}
			}
		}
		return v
	}
	number := func(v reflect.Value) float64 {
		if !v.IsValid() {
			return 0
		}
		if v.CanInt() {
			return float64(v.Int())
		}
		return v.Float()
	}
	for _, s := range Settings() {
		var c Config
		s.Set(&c, 7)
		if got := number(fieldAt(&c, s.Field)); got != 7 {
			t.Errorf("%s: set to 7 through its accessor, its field %s holds %v", s.Key, s.Field, got)
		}
		s.Set(&c, 0)
		if !reflect.DeepEqual(c, Config{}) && !(c.Retention.Keep != nil && number(fieldAt(&c, s.Field)) == 0) {
			t.Errorf("%s: set to 7 and back to 0, Config is %+v: the accessor wrote another field too", s.Key, c)
		}
	}
	for _, tm := range timers {
		var c Config
		*tm.at.of(&c) = 7
		if got := number(fieldAt(&c, tm.name)); got != 7 {
			t.Errorf("timer %s: set to 7 through its accessor, the field holds %v", tm.name, got)
		}
	}
}
