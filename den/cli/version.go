package cli

import (
	"runtime"
	"runtime/debug"
	"strings"

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
}

// stampedVersion is the version a packager stamps into the binary with
// -ldflags "-X github.com/den-project/den/den/cli.stampedVersion=V"
// (scripts/package-deb.sh stamps the package's version): to Go's build
// information a binary built from a checkout is "(devel)", which tells an
// operator nothing.
var stampedVersion string

func readBuildInfo() buildInfo {
	info, _ := debug.ReadBuildInfo()
	return stamped(fromBuildInfo(info), stampedVersion)
}

// stamped is b with the version a packager stamped, if any.
func stamped(b buildInfo, version string) buildInfo {
	if version != "" {
		b.Version = version
	}
	return b
}

func fromBuildInfo(info *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: "(unknown)", Go: runtime.Version()}
	if info == nil {
		return b
	}
	// A plugin author's binary has its own main module: report den's.
	b.Module, b.Version = info.Main.Path, info.Main.Version
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
		rev := b.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
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
