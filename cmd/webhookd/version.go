package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version, VCS revision and Go version of this build",
		Example: "  webhookd version\n  webhookd --version",
		Args:    cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprint(cmd.OutOrStdout(), buildVersion())
		},
	}
}

func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	return versionText(info, ok)
}

// versionText describes a build from its build info: the module version
// (a release tag, a pseudo-version, or "(devel)" for a build in a
// checkout), the commit, its time and whether the tree held uncommitted
// changes, when the build recorded them (go build in a checkout does, go
// install of a tagged release does not need to), and the Go version.
func versionText(info *debug.BuildInfo, ok bool) string {
	if !ok {
		return "webhookd: no build information (built without module support)\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "webhookd %s\n", info.Main.Version)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for _, s := range []struct{ key, label string }{{"vcs.revision", "revision"}, {"vcs.time", "time"}, {"vcs.modified", "modified"}} {
		if v, ok := settings[s.key]; ok {
			fmt.Fprintf(&b, "  %-9s %s\n", s.label+":", v)
		}
	}
	fmt.Fprintf(&b, "  %-9s %s %s/%s\n", "go:", info.GoVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
