package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestVersionText(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	tests := []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"built in a checkout", &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/webhookd/webhookd", Version: "v0.0.0-20261201191647-585b03d16f2a+dirty"},
			Settings: []debug.BuildSetting{
				{Key: "GOOS", Value: "linux"},
				{Key: "vcs", Value: "git"},
				{Key: "vcs.revision", Value: "585b03d16f2a6a0e3c1f1b9a4c1d2e3f4a5b6c7d"},
				{Key: "vcs.time", Value: "2026-12-01T19:16:47Z"},
				{Key: "vcs.modified", Value: "true"},
			},
		}, true, `webhookd v0.0.0-20261201191647-585b03d16f2a+dirty
  revision: 585b03d16f2a6a0e3c1f1b9a4c1d2e3f4a5b6c7d
  time:     2026-12-01T19:16:47Z
  modified: true
  go:       go1.26.8 ` + platform + "\n"},
		{"a release through go install", &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/webhookd/webhookd", Version: "v1.2.0"},
		}, true, "webhookd v1.2.0\n  go:       go1.26.8 " + platform + "\n"},
		{"no build information", nil, false, "webhookd: no build information (built without module support)\n"},
	}
	for _, tt := range tests {
		if got := versionText(tt.info, tt.ok); got != tt.want {
			t.Errorf("%s:\n%s\nwant:\n%s", tt.name, got, tt.want)
		}
	}
}

// TestVersionOfABuildFromACheckout builds webhookd in a fresh git
// repository holding this tree, with a change not committed, and reads the
// version back from the binary. The build is its own: a git worktree gets
// no VCS stamp (go looks for a .git directory), and GOFLAGS may turn
// stamping off.
func TestVersionOfABuildFromACheckout(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	run := func(dir, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, errOut.String())
		}
		return strings.TrimSpace(out.String())
	}
	root := run(".", "git", "rev-parse", "--show-toplevel")
	repo := t.TempDir()
	for _, f := range strings.Split(run(root, "git", "ls-files", "--cached", "--others", "--exclude-standard"), "\n") {
		data, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted and not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(repo, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) string {
		return run(repo, "git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "tree under test")
	commit := git("rev-parse", "HEAD")
	if err := os.WriteFile(filepath.Join(repo, "uncommitted.txt"), []byte("a change\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "webhookd")
	run(repo, "go", "build", "-buildvcs=true", "-o", bin, "./cmd/webhookd")

	flag, sub := run(repo, bin, "--version"), run(repo, bin, "version")
	if flag != sub {
		t.Errorf("--version:\n%s\nversion:\n%s\nwant the same", flag, sub)
	}
	for _, want := range []string{
		"webhookd v0.0.0-", // a pseudo-version: the repository has no tag
		"+dirty\n",
		"  revision: " + commit + "\n",
		"  modified: true\n",
		"  go:       " + runtime.Version() + " ",
	} {
		if !strings.Contains(flag, want) {
			t.Errorf("--version lacks %q:\n%s", want, flag)
		}
	}
}

// Every command's --help shows an example.
func TestEveryCommandHasAnExample(t *testing.T) {
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.Example == "" {
			t.Errorf("%q has no Example", cmd.CommandPath())
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	root := newRootCommand()
	walk(root)
	if len(root.Commands()) < 6 {
		t.Errorf("walked %d subcommands of the root, want every one", len(root.Commands()))
	}
	stdout, _, err := execRoot(t, "config", "check", "--help")
	if err != nil || !strings.Contains(stdout, "Examples:\n  webhookd config check") {
		t.Errorf("config check --help (%v):\n%s", err, stdout)
	}
}
