package config

import (
	"os"
	"strings"
	"testing"

	"github.com/den-project/den/den"
)

// Every key of docs/configuration.md's table of ranges has one home: a
// Setting of den (the node's keys: default, range and field, beside
// den.Config) or this package's own bounds (the command plugin's), never
// both and never neither; and every key either declares is a row there.
func TestEveryDocumentedKeyHasOneHome(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) == 6 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			documented[strings.Trim(strings.TrimSpace(cells[1]), "`")] = true
		}
	}
	if len(documented) == 0 {
		t.Fatal("docs/configuration.md has no table of ranges")
	}
	homes := map[string][]string{}
	for _, s := range den.Settings() {
		homes[s.Key] = append(homes[s.Key], "den.Settings ("+s.Field+")")
	}
	for key := range ownBounds() {
		homes[key] = append(homes[key], "den/config's bounds")
	}
	for key := range documented {
		if len(homes[key]) != 1 {
			t.Errorf("docs/configuration.md's key %s is declared in %d places, want 1: %v", key, len(homes[key]), homes[key])
		}
	}
	for key := range homes {
		if !documented[key] {
			t.Errorf("%s (%v) has no row in docs/configuration.md's table of ranges", key, homes[key])
		}
	}
	// What Load uses is exactly the two together.
	if len(bounds) != len(homes) {
		t.Errorf("bounds has %d keys; den.Settings and the command plugin's have %d", len(bounds), len(homes))
	}
}
