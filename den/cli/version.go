package cli

import (
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// buildInfo is what den knows of its own build.
type buildInfo struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	// mainIsDen: den is the build's main module, so the VCS stamp is
	// den's own (in a plugin author's binary it is the author's).
	mainIsDen bool
}

// stampedVersion is the version a packager stamps into the binary with
// -ldflags "-X github.com/den-project/den/den/cli.stampedVersion=V"
// (scripts/release.sh and scripts/package-deb.sh stamp the release's
// version): to Go's build information a binary built from a checkout
// without its VCS stamp is "(devel)", which tells an operator nothing.
var stampedVersion string

func readBuildInfo() buildInfo {
	info, _ := debug.ReadBuildInfo()
	return resolveVersion(fromBuildInfo(info), stampedVersion)
}

// resolveVersion is b with the version an operator is told: the one a
// packager stamped, if any; else Go's module version, unless that is
// "(devel)" and the VCS stamp is den's own: then the version release.sh
// would stamp on that commit without a tag, 0.0.0+gitDATE.COMMIT (DATE
// the commit's UTC date, COMMIT 12 hex digits), ".dirty" added for a
// modified tree.
func resolveVersion(b buildInfo, stamped string) buildInfo {
	switch {
	case stamped != "":
		b.Version = stamped
	case (b.Version == "" || b.Version == develVersion) && b.mainIsDen && b.Revision != "":
		b.Version = vcsVersion(b.Revision, b.Time, b.Modified)
	}
	return b
}

// develVersion is what Go's build information says of a main module built
// from a directory without a VCS version.
const develVersion = "(devel)"

// vcsVersion is 0.0.0+gitDATE.COMMIT[.dirty], as scripts/version.sh makes
// it from git for a commit without a tag.
func vcsVersion(revision, commitTime string, modified bool) string {
	v := "0.0.0+git"
	if t, err := time.Parse(time.RFC3339, commitTime); err == nil {
		v += t.UTC().Format("20060102") + "."
	}
	v += shortRevision(revision)
	if modified {
		v += ".dirty"
	}
	return v
}

func shortRevision(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

func fromBuildInfo(info *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: "(unknown)", Go: runtime.Version()}
	if info == nil {
		return b
	}
	// A plugin author's binary has its own main module: report den's.
	b.Module, b.Version = info.Main.Path, info.Main.Version
	b.mainIsDen = info.Main.Path == denModule
	for _, dep := range info.Deps {
		if dep.Path == denModule {
			b.Module, b.Version = dep.Path, dep.Version
		}
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

const denModule = "github.com/den-project/den"

// version is den's version line: module version, VCS revision and time.
func version() string { return versionLine(readBuildInfo()) }

func versionLine(b buildInfo) string {
	parts := []string{b.Version}
	if b.Revision != "" {
		rev := shortRevision(b.Revision)
		if b.Modified {
			rev += "+modified"
		}
		parts = append(parts, "revision "+rev)
	}
	if b.Time != "" {
		parts = append(parts, b.Time)
	}
	parts = append(parts, b.Go)
	return strings.Join(parts, ", ")
}

func newVersionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print den's version: module version and VCS revision of the build",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), readBuildInfo())
			}
			cmd.Println("den " + version())
			return nil
		},
	}
	addJSONFlag(cmd.Flags())
	return cmd
}
