package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyingRecipes runs every signing recipe of docs/verifying.md, as
// a reader pastes it into a shell, against the built binary on the
// configuration shown there: each must be accepted (or, for Slack's
// url_verification, answered with its challenge).
func TestVerifyingRecipes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	for _, tool := range []string{"bash", "curl", "openssl", "od"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the recipes of docs/verifying.md need %s: %v", tool, err)
		}
	}
	config, recipes := verifyingRecipes(t)
	if config == "" || len(recipes) < 8 {
		t.Fatalf("docs/verifying.md: a configuration and 8 recipes expected, found %d recipes", len(recipes))
	}
	dir := t.TempDir()
	public, admin := freeAddr(t), freeAddr(t)
	config = strings.Replace(config, `listen: ":8080"`, `listen: "`+public+`"`, 1)
	config = strings.Replace(config, "data_dir: ./data-verify-by-hand", "data_dir: "+filepath.Join(dir, "data"), 1)
	config += `admin: { listen: "` + admin + `" }` + "\n"
	path := filepath.Join(dir, "verify-by-hand.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	startBinary(t, path, public)
	for i, recipe := range recipes {
		script := strings.ReplaceAll(recipe, "localhost:8080", public)
		cmd := exec.Command("bash", "-eu", "-o", "pipefail", "-c", script)
		cmd.Env = commandEnv("")
		out, err := cmd.CombinedOutput()
		answer := string(out)
		if err != nil || !(strings.Contains(answer, `"decision":"accepted"`) || strings.HasPrefix(answer, `{"challenge":"`)) {
			t.Errorf("recipe %d: %v\n%s\nanswered: %s", i+1, err, recipe, answer)
		}
	}
}

// verifyingRecipes returns the yaml block and the sh blocks of the section
// "Signing a test delivery by hand".
func verifyingRecipes(t *testing.T) (config string, recipes []string) {
	t.Helper()
	raw, err := os.ReadFile("../../docs/verifying.md")
	if err != nil {
		t.Fatal(err)
	}
	var in bool
	var fence string
	var block strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Signing a test delivery by hand"
		case !in:
		case fence == "" && strings.HasPrefix(line, "```"):
			fence = strings.TrimPrefix(line, "```")
			block.Reset()
		case fence != "" && line == "```":
			switch fence {
			case "yaml":
				config = block.String()
			case "sh":
				recipes = append(recipes, block.String())
			}
			fence = ""
		case fence != "":
			block.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return config, recipes
}
