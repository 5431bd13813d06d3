package metrics_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/den-project/den/den/metrics"
)

// The files an operator loads into Prometheus and Grafana.
const (
	alertRules = "../../docs/monitoring/den-alerts.yml"
	dashboard  = "../../docs/monitoring/den-dashboard.json"
)

// exported is every metric name a den node's /metrics may have, and what
// Prometheus adds of its own (up).
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{"up": true}
	for _, n := range metrics.New(nil).Names() {
		names[n] = true
	}
	if !names["den_task_completions_total"] || !names["den_tasks_running"] || !names["process_resident_memory_bytes"] {
		t.Fatalf("Names misses metrics the node registers: %v", names)
	}
	return names
}

var (
	quoted   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	matchers = regexp.MustCompile(`\{[^}]*\}`)
	ranges   = regexp.MustCompile(`\[[^\]]*\]`)
	grouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	ident    = regexp.MustCompile(`[0-9.]*[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true}
)

// metricNames are the metric names a PromQL expression reads: what is
// left once strings, label matchers, ranges and grouping labels are cut,
// less function names, keywords and numbers.
func metricNames(expr string) []string {
	s := quoted.ReplaceAllString(expr, `""`)
	s = matchers.ReplaceAllString(s, " ")
	s = ranges.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	var out []string
	for _, m := range ident.FindAllString(s, -1) {
		if strings.HasSuffix(m, "(") || keywords[m] || (m[0] >= '0' && m[0] <= '9') || m[0] == '.' {
			continue
		}
		out = append(out, m)
	}
	return out
}

// checkNames reports each metric expr reads that den does not export (a
// histogram's _bucket, _sum and _count count as its own).
func checkNames(t *testing.T, where, expr string, names map[string]bool) {
	t.Helper()
	found := metricNames(expr)
	if len(found) == 0 {
		t.Errorf("%s: no metric found in %q", where, expr)
	}
	for _, n := range found {
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if !names[n] && !names[base] {
			t.Errorf("%s: %q reads %s, which den does not export", where, expr, n)
		}
	}
}

func TestMetricNamesOfPromQL(t *testing.T) {
	t.Parallel()
	got := metricNames(`histogram_quantile(0.99, sum by (le, kind) (rate(den_loop_pass_duration_seconds_bucket{job=~"$job", x="a{b}"}[$__rate_interval]))) / on (instance) group_left(queue) up > 0.25 and foo:bar unless 1e3`)
	want := []string{"den_loop_pass_duration_seconds_bucket", "up", "foo:bar"}
	if !slices.Equal(got, want) {
		t.Errorf("metricNames: %q, want %q", got, want)
	}
}

// The alert rules are a file Prometheus loads (promtool check rules, where
// promtool is installed), they alert on what an operator must be woken
// for, and every metric they read is one den exports.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err == nil {
		out, err := exec.Command(promtool, "check", "rules", alertRules).CombinedOutput()
		if err != nil {
			t.Errorf("promtool check rules %s: %v\n%s", alertRules, err, out)
		}
	} else {
		t.Log("no promtool on PATH (Debian: apt-get install prometheus): checking the rules' YAML and metric names only")
	}
	b, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("%s: %v", alertRules, err)
	}
	names := exported(t)
	alerts := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("rule %q: an alert needs a name, a severity and a summary", r.Alert)
			}
			alerts[r.Alert] = r.Expr
			checkNames(t, "alert "+r.Alert, r.Expr, names)
		}
	}
	for _, want := range []string{"DenNodeGone", "DenBacklogGrowingWithoutCompletions", "DenTaskFailureRateHigh", "DenRunnerStartFailures", "DenDatabaseUnreachable",
		oldestAlert} {
		if _, ok := alerts[want]; !ok {
			t.Errorf("no alert %s in %s", want, alertRules)
		}
	}
	checkOldestReadyAlert(t, alerts[oldestAlert])
}

// oldestAlert is the alert on den's SLO metric, the oldest ready task's
// age, and operationsDoc the page that explains its threshold.
const (
	oldestAlert   = "DenQueueOldestReadyTooOld"
	operationsDoc = "../../docs/operations.md"
)

// thresholdOf finds an expression's "> N" threshold.
var thresholdOf = regexp.MustCompile(`>\s*([0-9][0-9.e+]*)\s*$`)

// checkOldestReadyAlert checks that the alert on the oldest ready task
// reads den_queue_oldest_ready_seconds, compares it with a threshold, and
// that docs/operations.md names the alert and that threshold (its
// explanation).
func checkOldestReadyAlert(t *testing.T, expr string) {
	t.Helper()
	if !slices.Contains(metricNames(expr), "den_queue_oldest_ready_seconds") {
		t.Errorf("alert %s reads %q, not den_queue_oldest_ready_seconds", oldestAlert, expr)
	}
	m := thresholdOf.FindStringSubmatch(strings.TrimSpace(expr))
	if m == nil {
		t.Fatalf("alert %s: no threshold (> N seconds) at the end of %q", oldestAlert, expr)
	}
	doc, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	if !strings.Contains(text, oldestAlert) || !strings.Contains(text, "`> "+m[1]+"`") {
		t.Errorf("%s does not explain alert %s and its threshold (`> %s`)", operationsDoc, oldestAlert, m[1])
	}
}

// The dashboard imports into Grafana as it is (a datasource variable, no
// __inputs to fill in), and every query reads metrics den exports.
func TestDashboard(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	}
	type panel struct {
		ID         int            `json:"id"`
		Type       string         `json:"type"`
		Title      string         `json:"title"`
		Datasource map[string]any `json:"datasource"`
		GridPos    map[string]int `json:"gridPos"`
		Targets    []target       `json:"targets"`
		Panels     []panel        `json:"panels"`
	}
	var d struct {
		Title         string `json:"title"`
		UID           string `json:"uid"`
		SchemaVersion int    `json:"schemaVersion"`
		Inputs        []any  `json:"__inputs"`
		Templating    struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Query      any    `json:"query"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboard, err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 || len(d.Inputs) > 0 {
		t.Errorf("dashboard: title %q, uid %q, schemaVersion %d, __inputs %v: want a title, a uid, a schema version, no inputs", d.Title, d.UID, d.SchemaVersion, d.Inputs)
	}
	names := exported(t)
	vars := map[string]bool{}
	labelValues := regexp.MustCompile(`label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*)`)
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "query" {
			m := labelValues.FindStringSubmatch(v.Definition)
			if m == nil {
				t.Errorf("variable %s: %q is not label_values of a metric", v.Name, v.Definition)
			} else if !names[m[1]] {
				t.Errorf("variable %s reads %s, which den does not export", v.Name, m[1])
			}
		}
	}
	if !vars["datasource"] {
		t.Errorf("no datasource variable: the dashboard would need a data source picked on import")
	}
	ids := map[int]bool{}
	queries := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos["w"] == 0 || p.GridPos["h"] == 0 {
				t.Errorf("panel %q has no size", p.Title)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if uid, _ := p.Datasource["uid"].(string); uid != "${datasource}" {
				t.Errorf("panel %q: datasource %v, want the ${datasource} variable", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				queries++
				checkNames(t, "panel "+p.Title+" query "+tg.RefID, tg.Expr, names)
			}
		}
	}
	walk(d.Panels)
	if queries < 10 {
		t.Errorf("the dashboard has %d queries", queries)
	}
}
