package cli

import (
	"runtime/debug"
	"strings"
	"testing"
)

// den version says what the build knows: a stamped version first, Go's
// module version next, and for a main module that Go calls "(devel)" the
// version made from its VCS stamp, never just "(devel)" when there is one.
func TestVersionLine(t *testing.T) {
	t.Parallel()
	vcs := func(rev, at, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: at}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "ba0ca10f1f1f28999fa57544cc0e6566ed815d98"
	for _, c := range []struct {
		name    string
		info    *debug.BuildInfo
		stamped string
		want    string // the line's start (Go's version ends it)
	}{
		{"no build information", nil, "", "(unknown)"},
		{"devel without VCS stamp", &debug.BuildInfo{Main: debug.Module{Path: denModule, Version: "(devel)"}}, "",
			"(devel)"},
		{"devel with VCS stamp", &debug.BuildInfo{Main: debug.Module{Path: denModule, Version: "(devel)"},
			Settings: vcs(rev, "2026-12-06T20:44:46Z", "false")}, "",
			"0.0.0+git20261206.ba0ca10f1f1f, revision ba0ca10f1f1f, 2026-12-06T20:44:46Z"},
		{"devel, modified tree", &debug.BuildInfo{Main: debug.Module{Path: denModule, Version: "(devel)"},
			Settings: vcs(rev, "2026-12-06T20:44:46Z", "true")}, "",
			"0.0.0+git20261206.ba0ca10f1f1f.dirty, revision ba0ca10f1f1f+modified, 2026-12-06T20:44:46Z"},
		{"devel, commit time in another zone is dated in UTC", &debug.BuildInfo{Main: debug.Module{Path: denModule, Version: "(devel)"},
			Settings: vcs(rev, "2026-12-06T23:30:00-02:00", "false")}, "",
			"0.0.0+git20261207.ba0ca10f1f1f, revision ba0ca10f1f1f, 2026-12-06T23:30:00-02:00"},
		{"devel, no commit time", &debug.BuildInfo{Main: debug.Module{Path: denModule, Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}}, "",
			"0.0.0+gitabc123, revision abc123"},
		{"empty main version with VCS stamp", &debug.BuildInfo{Main: debug.Module{Path: denModule},
			Settings: vcs(rev, "2026-12-06T20:44:46Z", "false")}, "",
			"0.0.0+git20261206.ba0ca10f1f1f, revision"},
		{"Go's pseudo-version is kept", &debug.BuildInfo{Main: debug.Module{Path: denModule, Version: "v0.0.0-20261206204446-ba0ca10f1f1f"},
			Settings: vcs(rev, "2026-12-06T20:44:46Z", "false")}, "",
			"v0.0.0-20261206204446-ba0ca10f1f1f, revision ba0ca10f1f1f, 2026-12-06T20:44:46Z"},
		{"a tagged build", &debug.BuildInfo{Main: debug.Module{Path: denModule, Version: "v1.2.0"}}, "", "v1.2.0"},
		{"the stamped version wins", &debug.BuildInfo{Main: debug.Module{Path: denModule, Version: "(devel)"},
			Settings: vcs(rev, "2026-12-06T20:44:46Z", "false")}, "1.2.0",
			"1.2.0, revision ba0ca10f1f1f, 2026-12-06T20:44:46Z"},
		{"stamped without VCS stamp", &debug.BuildInfo{Main: debug.Module{Path: denModule, Version: "(devel)"}}, "0.0.0+git20261127.594d1cc0ab12",
			"0.0.0+git20261127.594d1cc0ab12"},
		{"den in a plugin author's binary: den's module version", &debug.BuildInfo{Main: debug.Module{Path: "example.com/mine", Version: "v0.1.0"},
			Deps:     []*debug.Module{{Path: denModule, Version: "v1.4.0"}},
			Settings: vcs("0123456789abcdef0123", "2026-11-23T09:00:00Z", "true")}, "",
			"v1.4.0, revision 0123456789ab+modified, 2026-11-23T09:00:00Z"},
		{"a replaced den in a plugin author's binary: the stamp is not den's", &debug.BuildInfo{Main: debug.Module{Path: "example.com/mine", Version: "(devel)"},
			Deps:     []*debug.Module{{Path: denModule, Version: "(devel)"}},
			Settings: vcs("0123456789abcdef0123", "2026-11-23T09:00:00Z", "false")}, "",
			"(devel), revision 0123456789ab, 2026-11-23T09:00:00Z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			line := versionLine(resolveVersion(fromBuildInfo(c.info), c.stamped))
			if !strings.HasPrefix(line, c.want) || !strings.HasSuffix(line, ", "+fromBuildInfo(nil).Go) {
				t.Fatalf("version line %q, want %q then Go's version", line, c.want)
			}
		})
	}
}
