package plugintest_test

import (
	"go/format"
	"os"
	"strings"
	"testing"

	"github.com/den-project/den/plugins"
)

// The plugin guide (docs/plugins.md) shows code that is compiled and
// run: each of its Go blocks is one of the outside module's files byte for
// byte (built and tested by TestOutsidePluginModule), gofmt-clean; and it
// lists every reserved field.
func TestPluginGuideIsTheExamples(t *testing.T) {
	guide, err := os.ReadFile("../../docs/plugins.md")
	if err != nil {
		t.Fatal(err)
	}
	section, ok := strings.CutPrefix(string(guide), "# Writing a plugin\n")
	if !ok {
		t.Fatal("docs/plugins.md does not start with its Writing a plugin heading")
	}
	files := map[string]bool{}
	for _, f := range []string{"main.go", "greet/greet.go", "greet/greet_test.go"} {
		b, err := os.ReadFile(outside + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		files[string(b)] = false
	}
	blocks := strings.Split(section, "```go\n")[1:]
	for i, b := range blocks {
		code, _, ok := strings.Cut(b, "```\n")
		if !ok {
			t.Fatalf("Go block %d is not closed", i+1)
		}
		if formatted, err := format.Source([]byte(code)); err != nil || string(formatted) != code {
			t.Errorf("Go block %d is not gofmt-clean (%v)", i+1, err)
		}
		if _, ok := files[code]; !ok {
			t.Errorf("Go block %d is not one of the outside module's files:\n%s", i+1, code)
			continue
		}
		files[code] = true
	}
	for code, shown := range files {
		if !shown {
			t.Errorf("docs/plugins.md does not show this file of the outside module:\n%.200s", code)
		}
	}
	for _, f := range plugins.ReservedFields() {
		if !strings.Contains(section, "`"+f+"`") {
			t.Errorf("reserved field %s is not listed in docs/plugins.md", f)
		}
	}
}
