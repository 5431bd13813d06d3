package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	heading  = regexp.MustCompile(`(?m)^#+ (.+)$`)
	link     = regexp.MustCompile(`\]\(([^)\s]+)\)|<img src="([^"]+)"`)
	notAlnum = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// anchor is the id GitHub gives a heading: lower case, punctuation
// dropped, spaces made hyphens.
func anchor(h string) string {
	return strings.ReplaceAll(notAlnum.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
}

// Every relative link in README.md and docs/*.md leads to a file of the
// repository, and to one of its headings where it names one.
func TestLinksLeadSomewhere(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md")
	anchors := map[string]map[string]bool{}
	read := func(path string) (string, bool) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", false
		}
		if anchors[filepath.Clean(path)] == nil {
			a := map[string]bool{}
			for _, m := range heading.FindAllStringSubmatch(string(b), -1) {
				a[anchor(m[1])] = true
			}
			anchors[filepath.Clean(path)] = a
		}
		return string(b), true
	}
	checked := 0
	for _, f := range files {
		text, _ := read(f)
		// Code blocks hold shell and Go, not links.
		var prose strings.Builder
		for i, part := range strings.Split(text, "```") {
			if i%2 == 0 {
				prose.WriteString(part)
			}
		}
		if i := strings.Index(prose.String(), "]]("); i >= 0 {
			t.Errorf("%s: a link with a doubled ]: %q", f, prose.String()[max(i-40, 0):i+10])
		}
		for _, m := range link.FindAllStringSubmatch(prose.String(), -1) {
			target := m[1] + m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: no such file", f, target)
					continue
				}
			}
			checked++
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if _, ok := read(dest); !ok {
				t.Errorf("%s: link %s: cannot read %s", f, target, dest)
				continue
			}
			if !anchors[filepath.Clean(dest)][frag] {
				t.Errorf("%s: link %s: %s has no heading #%s", f, target, dest, frag)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d links checked: the pattern finds nothing", checked)
	}
}

// conflictMarker is a line a merge leaves where it could not join two
// sides.
var conflictMarker = regexp.MustCompile(`(?m)^(<<<<<<<|>>>>>>>) `)

// No document of README.md and docs/*.md holds a merge's conflict
// markers (one did: a table row of both sides, and the markers, was read
// as prose).
func TestNoConflictMarkers(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(files, "../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := conflictMarker.FindIndex(b); m != nil {
			t.Errorf("%s: a merge's conflict marker at line %d", f, 1+strings.Count(string(b[:m[0]]), "\n"))
		}
	}
}
