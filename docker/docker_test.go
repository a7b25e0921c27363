// Package docker holds the container image and the demo compose stack.
// No Docker engine runs in the tests, so they check what can be checked
// without one: that the Dockerfile, docker/webhookd.yaml and compose.yaml
// agree with each other and with the repository, and that the go build line
// of the Dockerfile, run as it stands, gives a static binary that starts.
package docker

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/webhookd/webhookd/configs"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd   string // upper case: FROM, RUN, COPY, ...
	args  string
	stage int // index of the FROM it belongs to
}

type dockerfile struct {
	instructions []instruction
	stages       []string // name (AS ...) or image of each FROM
}

func parseDockerfile(t *testing.T, path string) *dockerfile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	df := &dockerfile{}
	var line strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(text, "#") || (text == "" && line.Len() == 0) {
			continue // comments, and also those between continuation lines
		}
		if cont, ok := strings.CutSuffix(text, `\`); ok {
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(text)
		cmd, args, _ := strings.Cut(line.String(), " ")
		line.Reset()
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			fields := strings.Fields(in.args)
			name := fields[0]
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				name = fields[2]
			}
			df.stages = append(df.stages, name)
		}
		in.stage = len(df.stages) - 1
		df.instructions = append(df.instructions, in)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(df.stages) == 0 {
		t.Fatalf("%s has no FROM", path)
	}
	return df
}

// all returns the instructions cmd of the final stage, or of every stage
// when anyStage is set.
func (df *dockerfile) all(cmd string, anyStage bool) []instruction {
	var out []instruction
	for _, in := range df.instructions {
		if in.cmd == cmd && (anyStage || in.stage == len(df.stages)-1) {
			out = append(out, in)
		}
	}
	return out
}

// one returns the final stage's only cmd instruction.
func (df *dockerfile) one(t *testing.T, cmd string) instruction {
	t.Helper()
	ins := df.all(cmd, false)
	if len(ins) != 1 {
		t.Fatalf("final stage has %d %s instructions, want 1", len(ins), cmd)
	}
	return ins[0]
}

// copyArgs splits a COPY into its flags, sources and destination.
func copyArgs(t *testing.T, in instruction) (flags map[string]string, srcs []string, dest string) {
	t.Helper()
	words := splitWords(t, in.args)
	flags = map[string]string{}
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		k, v, _ := strings.Cut(strings.TrimPrefix(words[0], "--"), "=")
		flags[k] = v
		words = words[1:]
	}
	if strings.HasPrefix(strings.Join(words, " "), "[") {
		words = nil
		if err := json.Unmarshal([]byte(in.args[strings.Index(in.args, "["):]), &words); err != nil {
			t.Fatalf("COPY %s: %v", in.args, err)
		}
	}
	if len(words) < 2 {
		t.Fatalf("COPY %s: want sources and a destination", in.args)
	}
	return flags, words[:len(words)-1], words[len(words)-1]
}

// execForm decodes an instruction in exec (JSON array) form.
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
		t.Fatalf("%s %s: not in exec form (a JSON array): %v", in.cmd, in.args, err)
	}
	return argv
}

// splitWords splits a command line as a shell does for the plain words,
// quotes and backslashes that a RUN line uses. Anything that would need a
// real shell (;, &&, |, $) fails the test rather than being misread.
func splitWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case strings.ContainsRune(";&|$`<>", r):
			t.Fatalf("%q needs a shell to read; keep the line to plain words", s)
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("%q: unterminated quote", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// goBuild is the Dockerfile's go build line: its environment assignments,
// its arguments after "go build", and its -o path.
type goBuild struct {
	env  []string
	args []string
	out  string
}

func parseGoBuild(t *testing.T, df *dockerfile) goBuild {
	t.Helper()
	var found []instruction
	for _, in := range df.all("RUN", true) {
		if strings.Contains(in.args, "go build") {
			found = append(found, in)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d RUN lines run go build, want 1", len(found))
	}
	words := splitWords(t, found[0].args)
	for len(words) > 0 && strings.HasPrefix(words[0], "--") { // --mount=... and other RUN flags
		words = words[1:]
	}
	var b goBuild
	for len(words) > 0 && strings.Contains(words[0], "=") {
		b.env = append(b.env, words[0])
		words = words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		t.Fatalf("RUN %s: want [VAR=value ...] go build ...", found[0].args)
	}
	b.args = words[2:]
	for i, a := range b.args {
		if a == "-o" && i+1 < len(b.args) {
			b.out = b.args[i+1]
		}
	}
	if b.out == "" {
		t.Fatalf("go build line %q has no -o", found[0].args)
	}
	return b
}

const repoRoot = ".."

func TestDockerfileCopiesWhatExists(t *testing.T) {
	df := parseDockerfile(t, "Dockerfile")
	ignore := readDockerignore(t, "Dockerfile.dockerignore")
	var n int
	for _, in := range df.all("COPY", true) {
		flags, srcs, _ := copyArgs(t, in)
		if _, ok := flags["from"]; ok {
			continue // from another stage, not the build context
		}
		for _, src := range srcs {
			n++
			if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
				t.Errorf("COPY %s: source %s is not in the repository (the build context is its root): %v", in.args, src, err)
			}
			if p, ok := ignored(ignore, src); ok {
				t.Errorf("COPY %s: source %s is excluded by pattern %q of Dockerfile.dockerignore", in.args, src, p)
			}
		}
	}
	if n == 0 {
		t.Error("no COPY from the build context found")
	}

	// COPY . . takes the whole context: go build needs every source file
	// and every file a go:embed names to be left in it.
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while walked: others edit the tree meanwhile
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir // not part of any build
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		needed := []string{rel}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(src), "\n") {
			if patterns, ok := strings.CutPrefix(line, "//go:embed "); ok {
				for _, p := range strings.Fields(patterns) {
					needed = append(needed, filepath.Join(filepath.Dir(rel), p))
				}
			}
		}
		for _, n := range needed {
			if p, ok := ignored(ignore, n); ok {
				t.Errorf("%s is needed by the build but excluded by pattern %q of Dockerfile.dockerignore", n, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEntrypointIsTheBuiltBinary(t *testing.T) {
	df := parseDockerfile(t, "Dockerfile")
	build := parseGoBuild(t, df)
	entry := execForm(t, df.one(t, "ENTRYPOINT"))
	var copied string
	for _, in := range df.all("COPY", false) {
		flags, srcs, dest := copyArgs(t, in)
		if flags["from"] != "" && slices.Contains(srcs, build.out) {
			copied = dest
		}
	}
	if copied == "" {
		t.Fatalf("the final stage does not copy the built binary %s", build.out)
	}
	if len(entry) == 0 || entry[0] != copied {
		t.Errorf("ENTRYPOINT %q does not run the built binary, copied to %s", entry, copied)
	}
	if user := df.one(t, "USER").args; strings.HasPrefix(user, "root") || strings.HasPrefix(user, "0") {
		t.Errorf("USER %s: the image must not run as root", user)
	}
}

// containerConfig returns the configuration the image runs with: the file
// that the final stage copies to the path CMD passes to --config.
func containerConfig(t *testing.T, df *dockerfile) (*configs.Config, string) {
	t.Helper()
	cmd := execForm(t, df.one(t, "CMD"))
	i := slices.Index(cmd, "--config")
	if len(cmd) == 0 || cmd[0] != "serve" || i < 0 || i+1 >= len(cmd) {
		t.Fatalf("CMD %q: want serve --config FILE", cmd)
	}
	for _, in := range df.all("COPY", false) {
		flags, srcs, dest := copyArgs(t, in)
		if flags["from"] == "" && dest == cmd[i+1] && len(srcs) == 1 {
			t.Setenv("WEBHOOKD_ADMIN_TOKEN", "")
			cfg, err := configs.Load(filepath.Join(repoRoot, srcs[0]))
			if err != nil {
				t.Fatalf("the image's configuration does not load: %v", err)
			}
			return cfg, srcs[0]
		}
	}
	t.Fatalf("the final stage copies nothing to %s, the --config of CMD", cmd[i+1])
	return nil, ""
}

func TestImageConfiguration(t *testing.T) {
	df := parseDockerfile(t, "Dockerfile")
	cfg, src := containerConfig(t, df)
	if src != "docker/webhookd.yaml" {
		t.Errorf("the image's configuration is %s, want docker/webhookd.yaml", src)
	}

	var exposed []string
	for _, in := range df.all("EXPOSE", false) {
		for _, p := range strings.Fields(in.args) {
			exposed = append(exposed, strings.TrimSuffix(p, "/tcp"))
		}
	}
	slices.Sort(exposed)
	want := []string{port(t, cfg.Listen), port(t, cfg.Admin.Listen)}
	slices.Sort(want)
	if !slices.Equal(exposed, want) {
		t.Errorf("EXPOSE %v, but the configuration listens on %v", exposed, want)
	}
	// Listening on loopback inside a container reaches nothing outside it.
	for _, addr := range []string{cfg.Listen, cfg.Admin.Listen} {
		if host, _, _ := net.SplitHostPort(addr); host != "" && host != "0.0.0.0" && host != "::" {
			t.Errorf("listen address %s is not reachable from outside the container", addr)
		}
	}
	if volume := df.one(t, "VOLUME").args; strings.Trim(volume, `[]" `) != cfg.DataDir {
		t.Errorf("VOLUME %s, but data_dir is %s", volume, cfg.DataDir)
	}

	// The same sources as the example configuration, which the quick start
	// uses; the container's may add forwarding to the compose sink.
	example, err := configs.Parse(configs.Example())
	if err != nil {
		t.Fatal(err)
	}
	strip := func(ss []configs.Source) []configs.Source {
		out := slices.Clone(ss)
		for i := range out {
			out[i].Routes = nil
		}
		return out
	}
	if !reflect.DeepEqual(strip(cfg.Sources), strip(example.Sources)) {
		t.Errorf("docker/webhookd.yaml sources differ from configs/webhookd.yaml:\n%+v\n%+v", cfg.Sources, example.Sources)
	}
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type composeFile struct {
	Services map[string]struct {
		Image string `yaml:"image"`
		Build *struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		Command     []string       `yaml:"command"`
		Ports       []string       `yaml:"ports"`
		Volumes     []string       `yaml:"volumes"`
		Healthcheck map[string]any `yaml:"healthcheck"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

func TestComposeMatchesTheImage(t *testing.T) {
	raw, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	df := parseDockerfile(t, "Dockerfile")
	cfg, _ := containerConfig(t, df)

	gw, ok := c.Services["webhookd"]
	if !ok {
		t.Fatal("compose.yaml has no webhookd service")
	}
	// The build is the Dockerfile's, from the repository root.
	if gw.Build == nil {
		t.Fatal("the webhookd service does not build the image")
	}
	context := filepath.Join(".", gw.Build.Context) // relative to compose.yaml's directory
	if abs(t, context) != abs(t, repoRoot) {
		t.Errorf("build context %s is not the repository root", gw.Build.Context)
	}
	if abs(t, filepath.Join(context, gw.Build.Dockerfile)) != abs(t, "Dockerfile") {
		t.Errorf("build dockerfile %s is not docker/Dockerfile", gw.Build.Dockerfile)
	}

	// The published container ports are the configuration's, and the admin
	// API is published on the host's loopback only.
	published := map[string]string{} // container port -> host IP
	for _, p := range gw.Ports {
		parts := strings.Split(p, ":")
		hostIP := ""
		if len(parts) == 3 {
			hostIP = parts[0]
		}
		published[strings.TrimSuffix(parts[len(parts)-1], "/tcp")] = hostIP
	}
	public, admin := port(t, cfg.Listen), port(t, cfg.Admin.Listen)
	if len(published) != 2 {
		t.Errorf("webhookd publishes %v, want exactly %s and %s", gw.Ports, public, admin)
	}
	if _, ok := published[public]; !ok {
		t.Errorf("webhookd does not publish the webhook port %s: %v", public, gw.Ports)
	}
	if ip, ok := published[admin]; !ok || ip != "127.0.0.1" {
		t.Errorf("the admin port %s must be published on 127.0.0.1 only: %v", admin, gw.Ports)
	}
	if !slices.ContainsFunc(gw.Volumes, func(v string) bool { return strings.HasSuffix(v, ":"+cfg.DataDir) }) {
		t.Errorf("no volume mounted on data_dir %s: %v", cfg.DataDir, gw.Volumes)
	}

	// Every route's URL names a compose service listening on its port, so
	// the demo stack delivers somewhere.
	for _, s := range cfg.Sources {
		for _, r := range s.Routes {
			u, err := url.Parse(r.URL)
			if err != nil {
				t.Fatal(err)
			}
			svc, ok := c.Services[u.Hostname()]
			if !ok {
				t.Errorf("route %s/%s forwards to %s, which is no compose service", s.Name, r.Name, u.Host)
				continue
			}
			if svc.Image != gw.Image {
				t.Errorf("service %s runs %s, not the webhookd image %s", u.Hostname(), svc.Image, gw.Image)
			}
			i := slices.Index(svc.Command, "--listen")
			if i < 0 || i+1 >= len(svc.Command) || svc.Command[i+1] != "0.0.0.0:"+u.Port() {
				t.Errorf("service %s (%q) does not listen on 0.0.0.0:%s, where route %s/%s forwards", u.Hostname(), svc.Command, u.Port(), s.Name, r.Name)
			}
		}
	}

	for name, svc := range c.Services {
		if len(svc.Healthcheck) == 0 {
			t.Errorf("compose service %s has no healthcheck", name)
		}
	}
}

func abs(t *testing.T, path string) string {
	t.Helper()
	p, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestImageBinaryIsStatic runs the Dockerfile's go build line as it stands
// (its environment, its flags) for Linux, then checks what distroless/static
// needs: no dynamic loader, no shared libraries; and what the flags promise:
// no symbol table, no local paths.
func TestImageBinaryIsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	build := parseGoBuild(t, parseDockerfile(t, "Dockerfile"))
	bin := filepath.Join(t.TempDir(), "webhookd")
	args := slices.Clone(build.args)
	args[slices.Index(args, build.out)] = bin
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOOS=linux")
	cmd.Env = append(cmd.Env, build.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, out)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader (PT_INTERP): it is not static and will not start on distroless/static")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v (%v)", libs, err)
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: -ldflags=-s did not apply")
	}
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if root := abs(t, repoRoot); bytes.Contains(raw, []byte(root)) {
		t.Errorf("the binary contains the local path %s: -trimpath did not apply", root)
	}

	if runtime.GOOS != "linux" {
		t.Skip("the binary is for Linux")
	}
	// The image's command lines parse: cobra answers --help only for a known
	// subcommand whose flags all exist.
	df := parseDockerfile(t, "Dockerfile")
	run := func(argv ...string) {
		out, err := exec.Command(bin, append(argv, "--help")...).CombinedOutput()
		if err != nil {
			t.Errorf("webhookd %s --help: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	run()
	run(execForm(t, df.one(t, "CMD"))...)
	// The HEALTHCHECK runs the image's own binary.
	hc := df.one(t, "HEALTHCHECK")
	_, probe, ok := strings.Cut(hc.args, "CMD ")
	if !ok {
		t.Fatalf("HEALTHCHECK %s: want CMD in exec form", hc.args)
	}
	hcArgv := execForm(t, instruction{cmd: "HEALTHCHECK", args: probe})
	if hcArgv[0] != execForm(t, df.one(t, "ENTRYPOINT"))[0] {
		t.Errorf("HEALTHCHECK runs %s, not the image's binary", hcArgv[0])
	}
	run(hcArgv[1:]...)
	var c composeFile
	raw, err = os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	for name, svc := range c.Services {
		if svc.Image == c.Services["webhookd"].Image && len(svc.Command) > 0 {
			t.Run(name, func(t *testing.T) { run(svc.Command...) })
		}
		if test, ok := svc.Healthcheck["test"].([]any); ok && len(test) > 2 && test[0] == "CMD" {
			argv := make([]string, 0, len(test)-2)
			for _, a := range test[2:] {
				argv = append(argv, fmt.Sprint(a))
			}
			t.Run(name+"/healthcheck", func(t *testing.T) { run(argv...) })
		}
	}
}

// readDockerignore returns the patterns of a .dockerignore file.
func readDockerignore(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	return patterns
}

// ignored reports the pattern that excludes path or a directory above it.
// It knows the forms Dockerfile.dockerignore uses: plain paths, * and ?,
// and a leading **/ for any depth; exceptions (!) are not supported.
func ignored(patterns []string, path string) (string, bool) {
	parts := strings.Split(filepath.ToSlash(filepath.Clean(path)), "/")
	if path == "." {
		return "", false
	}
	for _, p := range patterns {
		anyDepth := strings.HasPrefix(p, "**/")
		pat := strings.TrimPrefix(p, "**/")
		for end := 1; end <= len(parts); end++ { // path and each directory above it
			start := 0
			if anyDepth {
				start = end - strings.Count(pat, "/") - 1
			}
			if start < 0 {
				continue
			}
			if ok, _ := filepath.Match(pat, strings.Join(parts[start:end], "/")); ok {
				return p, true
			}
		}
	}
	return "", false
}
