package config

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/viper"

	"github.com/den-project/den/den"
)

// boundKind is what a bounded key holds: den.Setting's kinds.
type boundKind = den.SettingKind

const (
	kindDuration = den.KindDuration // a duration such as 1s (a bare number is seconds)
	kindCount    = den.KindCount    // a whole number
	kindNumber   = den.KindNumber   // any number
)

// bound is the range a duration or number key accepts (see bounds).
type bound struct {
	kind     boundKind
	min, max float64 // durations in nanoseconds
	unit     string  // what a count or number counts, for messages
}

func counts(min, max int64, unit string) bound {
	return bound{kind: kindCount, min: float64(min), max: float64(max), unit: unit}
}

// format writes x as the key's values are written: 100ms, 1024, 0.5.
func (b bound) format(x float64) string {
	switch b.kind {
	case kindDuration:
		return formatDuration(time.Duration(x))
	case kindCount:
		return strconv.FormatInt(int64(x), 10)
	}
	if math.Abs(x) < 1e15 {
		return strconv.FormatFloat(x, 'f', -1, 64) // 16777216, not 1.6777216e+07
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}

// withUnit appends the unit to a formatted value.
func (b bound) withUnit(s string) string {
	if b.unit == "" {
		return s
	}
	return s + " " + b.unit
}

// Range says what the key accepts: "100ms to 30s", "1 to 100000 tasks".
func (b bound) Range() string {
	return b.withUnit(b.format(b.min) + " to " + b.format(b.max))
}

// check refuses x outside the range; shown is x as the message writes it.
func (b bound) check(key string, x float64, shown string) error {
	switch {
	case x < b.min:
		return fmt.Errorf("%s: %s is below the minimum %s (allowed: %s)", key, shown, b.format(b.min), b.Range())
	case x > b.max:
		return fmt.Errorf("%s: %s is above the maximum %s (allowed: %s)", key, shown, b.format(b.max), b.Range())
	}
	return nil
}

// formatDuration writes d without trailing zero units: 1m, not 1m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// boundedDuration reads a duration key and checks it against bounds.
func boundedDuration(v *viper.Viper, key string) (time.Duration, error) {
	b := bounds[key]
	d, err := duration(v, key)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not a duration such as %v (allowed: %s)", key, fmt.Sprint(v.Get(key)), defaults[key], b.Range())
	}
	return d, b.check(key, float64(d), formatDuration(d))
}

// boundedCount reads a whole-number key and checks it against bounds.
func boundedCount(v *viper.Viper, key string) (int64, error) {
	b := bounds[key]
	n, err := count(v, key)
	if err != nil {
		return 0, fmt.Errorf("%s %v is not a whole number such as %v (allowed: %s)", key, v.Get(key), defaults[key], b.Range())
	}
	return n, b.check(key, float64(n), strconv.FormatInt(n, 10))
}

// boundedNumber reads a number key and checks it against bounds.
func boundedNumber(v *viper.Viper, key string) (float64, error) {
	b := bounds[key]
	f, ok := number(v.Get(key))
	if !ok {
		return 0, fmt.Errorf("%s %v is not a number such as %v (allowed: %s)", key, v.Get(key), defaults[key], b.Range())
	}
	return f, b.check(key, f, b.format(f))
}

// ValidNodeName checks a node name: at most MaxNodeNameLength bytes of
// UTF-8, every character printable (a space is; tabs, newlines, escape
// sequences and other control or format characters are not). The name is
// written to node documents, logs, the web page and terminals.
func ValidNodeName(name string) error {
	if len(name) > MaxNodeNameLength {
		return fmt.Errorf("node name is %d bytes; at most %d are allowed", len(name), MaxNodeNameLength)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("node name %q is not valid UTF-8", name)
	}
	for i, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("node name %q has a character that is not printable (%U at byte %d); use letters, digits, dots, dashes", name, r, i)
		}
	}
	return nil
}

// otherVariables are DEN_ variables that are not settings but that den, its
// task runners, its service unit or its tests use: they never warn.
var otherVariables = map[string]bool{
	"DEN_CONFIG": true, "DEN_ARGS": true, // scripts/den.env: the unit's --config and extra flags
	"DEN_RUN":               true, // the run marker (package contain) in a task's processes
	"DEN_RUNNER_WORKER":     true, // runner: set in a runner's worker
	"DEN_RUNNER_SUPERVISOR": true, // runner: the worker's supervisor
	"DEN_RELAY_FD":          true, // runner.EnvRelayFD
	"DEN_TASKS_FD":          true, // runner.EnvTasksFD
	"DEN_TASK_RUNNER_SPEC":  true, // runner.SpecEnv
	"DEN_SANDBOX":           true, // sandbox.EnvSpec
	"DEN_TIMER_SLACK_NS":    true, // timerslack.EnvOriginal: the node's timer slack before den raised it
	"DEN_WEB_SCREENSHOTS":   true, // den/web's browser test: renew docs/web.md's screenshots
}

// otherPrefixes start the names of the test suite's and the benchmarks'
// variables (DEN_TEST_MONGODB_URI, DEN_BENCH_TASKS, ...).
var otherPrefixes = []string{"DEN_TEST_", "DEN_BENCH_"}

// settingVariables are the DEN_ variables that set a key.
func settingVariables() map[string]bool {
	out := map[string]bool{"DEN_DATABASE": true}
	for key := range defaults {
		if key == "plugins" { // the file's alone
			continue
		}
		out["DEN_"+strings.ToUpper(strings.ReplaceAll(key, ".", "_"))] = true
	}
	return out
}

// envWarnings is one warning for each DEN_ variable of the environment
// that is neither a setting nor one of otherVariables: a typo
// (DEN_INTERVALL) would otherwise be ignored without a word.
func envWarnings() []string {
	settings := settingVariables()
	var unknown []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "DEN_") || settings[name] || otherVariables[name] {
			continue
		}
		other := false
		for _, p := range otherPrefixes {
			other = other || strings.HasPrefix(name, p)
		}
		if !other {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	var out []string
	for _, name := range unknown {
		if strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			name = strconv.Quote(name) // never a raw escape sequence on an operator's terminal
		}
		out = append(out, fmt.Sprintf("environment variable %s is not a den setting and is ignored (a setting is DEN_ and a key of `den config print` in capitals, dots as _)", name))
	}
	return out
}

// finite reports whether f is a number a bound can compare.
func finite(f float64) bool {
	return !math.IsNaN(f) && !math.IsInf(f, 0)
}
