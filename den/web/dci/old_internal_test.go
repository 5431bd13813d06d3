package dci

import (
	"fmt"
	"strings"
	"testing"
)

// /search-tasks-json's decisions, as pure functions: the page it reads
// and the filter it builds, as the Perl DCI does.
func TestSearchTasksJSONDecisions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		o           obj
		skip, limit int64
	}{
		{"none", obj{}, 0, OldSearchLimit},
		{"a limit", obj{{"limit", "20"}, {"skip", "5"}}, 5, 20},
		{"a limit too large", obj{{"limit", fmt.Sprint(OldSearchLimit)}}, 0, OldSearchLimit},
		{"10,000, which den allowed before", obj{{"limit", "10000"}}, 0, 100},
		{"negative", obj{{"limit", "-3"}, {"skip", "-1"}}, 0, OldSearchLimit},
		{"not numbers", obj{{"limit", "many"}, {"skip", "x"}}, 0, OldSearchLimit},
	} {
		skip, limit := searchPage(c.o)
		if skip != c.skip || limit != c.limit {
			t.Errorf("%s: searchPage = %d, %d; want %d, %d", c.name, skip, limit, c.skip, c.limit)
		}
	}

	const id = "0123456789abcdef01234567"
	for _, c := range []struct {
		name string
		o    obj
		want string // the filter as JSON, or the message
	}{
		{"no filter", obj{}, "{}"},
		{"JSON text", obj{{"filter", `{"status": "-2"}`}}, `{"status":-2}`},
		{"queue and id", obj{{"queue", id}, {"filter", obj{{"id", id}}}}, `{"queue":{"$oid":"` + id + `"},"_id":{"$oid":"` + id + `"}}`},
		{"not an object", obj{{"filter", `[1]`}}, "JSON object required for filter"},
		{"bad JSON without json", obj{{"filter", `{`}}, "JSON object required for filter"},
		{"nested too deep", obj{{"filter", strings.Repeat(`{"$and":[`, 11) + "{}" + strings.Repeat("]}", 11)}},
			"over: the JSON nests objects and arrays more than 20 deep (the outermost counts 1): at most 20"},
		{"$in too long", obj{{"filter", `{"i":{"$in":[` + strings.Repeat("1,", 1000) + `1]}}`}},
			`over: "$in" (array) holds more than 1000 values: an object or array of a search holds at most 1000`},
	} {
		f, msg, over := searchFilter(c.o)
		got := msg
		switch {
		case over != nil:
			got = "over: " + over.Error()
		case msg == "":
			got = string(encodeJSON(f, false))
		}
		if got != c.want {
			t.Errorf("%s: searchFilter = %s, want %s", c.name, got, c.want)
		}
	}
}
