package main

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The README shows commands in ```console blocks: a line "$ command" (a
// trailing backslash continues it), followed by the output it prints.
// TestREADMECommands runs every one of them against the built binary on
// loopback ports, in order, and compares each answer with the output shown.

const readmePath = "../../README.md"

// readmeCommand is one "$ " line of a console block and the output shown
// after it.
type readmeCommand struct {
	line   int // of the "$ ", for messages
	text   string
	output string
}

func readmeCommands(t *testing.T) ([]readmeCommand, []string) {
	t.Helper()
	raw, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []readmeCommand
	var inline []string
	var fence string // the info string of the open fence, "" outside
	var cur *readmeCommand
	var continued bool
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case fence == "" && strings.HasPrefix(line, "```"):
			fence = strings.TrimPrefix(line, "```")
			if fence == "" {
				fence = "text"
			}
			if fence == "sh" || fence == "bash" || fence == "shell" {
				t.Errorf("README.md:%d: a ```%s block; write commands in ```console blocks (\"$ command\", then its output) so that this test runs them", n, fence)
			}
		case fence != "" && line == "```":
			if cur != nil {
				cur.output = strings.TrimSuffix(cur.output, "\n")
				cmds = append(cmds, *cur)
				cur = nil
			}
			fence = ""
		case fence == "console" && continued:
			cur.text += "\n" + line
			continued = strings.HasSuffix(line, `\`)
		case fence == "console" && strings.HasPrefix(line, "$ "):
			if cur != nil {
				cur.output = strings.TrimSuffix(cur.output, "\n")
				cmds = append(cmds, *cur)
			}
			cur = &readmeCommand{line: n, text: strings.TrimPrefix(line, "$ ")}
			continued = strings.HasSuffix(line, `\`)
		case fence == "console" && cur != nil:
			cur.output += line + "\n"
		case fence == "console":
			t.Errorf("README.md:%d: output before any command in a console block", n)
		case fence == "":
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				if commandLike.MatchString(m[1]) {
					inline = append(inline, m[1])
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cmds, inline
}

var (
	inlineCode  = regexp.MustCompile("`([^`]+)`")
	commandLike = regexp.MustCompile(`^(go|docker|curl|git|webhookd|jq) `)
	// A command that starts webhookd in the foreground, as a terminal of
	// its own: optional VAR=value assignments, then go run.
	foreground = regexp.MustCompile(`^((?:[A-Z_]+=\S+ )*)go run \./cmd/webhookd (serve|sink)$`)
	timestamp  = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	dateHeader = regexp.MustCompile(`(?m)^Date: .*$`)
)

// normal makes two runs' answers comparable: times and the Date header
// differ, line endings are curl's.
func normal(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = timestamp.ReplaceAllString(s, "<time>")
	s = dateHeader.ReplaceAllString(s, "Date: <date>")
	return strings.TrimRight(s, "\n")
}

// readmeProcess is a webhookd the README runs in a terminal of its own.
type readmeProcess struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	errOut *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// stop ends the process by its PID, as Ctrl-C in its terminal would.
func (p *readmeProcess) stop(t *testing.T) {
	t.Helper()
	if p == nil || p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Errorf("%s: %v", p.cmd.Args, err)
		}
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-done
		t.Errorf("%s did not stop on SIGINT", p.cmd.Args)
	}
}

// commandEnv is the test's environment without the variables a README
// command sets, and with loopback never proxied.
func commandEnv(assignments string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "WEBHOOKD_") || strings.HasPrefix(strings.ToLower(kv), "no_proxy=")
	})
	env = append(env, "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	return append(env, strings.Fields(assignments)...)
}

func TestREADMECommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the README's commands need %s: %v", tool, err)
		}
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmds, inline := readmeCommands(t)
	if len(cmds) == 0 {
		t.Fatal("README.md has no console blocks")
	}

	// The default configuration, on free loopback ports and a temp data
	// directory: the README's addresses stand for these.
	work := t.TempDir()
	public, admin, sinkAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	example, err := os.ReadFile("../../configs/webhookd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	config := string(example)
	for _, r := range [][2]string{
		{`listen: ":8080"`, `listen: "` + public + `"`},
		{`listen: "127.0.0.1:8081"`, `listen: "` + admin + `"`},
		{`http://127.0.0.1:9000/`, `http://` + sinkAddr + `/`},
		{`data_dir: ./data`, `data_dir: ` + filepath.Join(work, "data")},
	} {
		if strings.Count(config, r[0]) != 1 {
			t.Fatalf("configs/webhookd.yaml does not hold %q once: the README's addresses no longer match it", r[0])
		}
		config = strings.Replace(config, r[0], r[1], 1)
	}
	configPath := filepath.Join(work, "webhookd.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	toLoopback := strings.NewReplacer("localhost:8080", public, "localhost:8081", admin,
		"localhost:9000", sinkAddr, "127.0.0.1:9000", sinkAddr)
	fromLoopback := strings.NewReplacer(sinkAddr, "127.0.0.1:9000", public, "localhost:8080", admin, "127.0.0.1:8081")

	var serve, sink *readmeProcess
	var sinkShown readmeCommand
	t.Cleanup(func() { serve.stop(t); sink.stop(t) })
	start := func(c readmeCommand, env, sub string) *readmeProcess {
		args := []string{sub, "--config", configPath}
		if sub == "sink" {
			args = []string{sub, "--listen", sinkAddr}
		}
		p := &readmeProcess{cmd: exec.Command(bin, args...), out: &lockedBuffer{}, errOut: &lockedBuffer{}}
		p.cmd.Dir, p.cmd.Env = work, commandEnv(env)
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.errOut
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("README.md:%d: %s: %v", c.line, c.text, err)
		}
		ready := "http://" + public + "/readyz"
		if sub == "sink" {
			ready = "http://" + sinkAddr + "/stats"
		}
		waitFor(t, c.text, func() bool {
			resp, err := http.Get(ready)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		})
		return p
	}

	for _, c := range cmds {
		if m := foreground.FindStringSubmatch(c.text); m != nil {
			switch m[2] {
			case "serve":
				serve.stop(t) // the README stops one gateway before it starts the next
				serve = start(c, m[1], "serve")
				if c.output != "" {
					t.Errorf("README.md:%d: output shown for %s, whose log lines hold times and ports", c.line, c.text)
				}
			case "sink":
				sink, sinkShown = start(c, m[1], "sink"), c
			}
			continue
		}
		if c.text == "go test -race ./..." {
			ci, err := os.ReadFile("../../.ci/run")
			if err != nil || !slices.Contains(strings.Split(string(ci), "\n"), c.text) {
				t.Errorf("README.md:%d: %s is not a line of .ci/run, so CI does not run it (%v)", c.line, c.text, err)
			}
			continue
		}
		if !strings.HasPrefix(c.text, "curl ") {
			t.Errorf("README.md:%d: %q: this test does not know how to run it", c.line, c.text)
			continue
		}
		// curl -d alone labels the body a form, and the sink and the
		// downstream would get it as one.
		if strings.Contains(c.text, " -d ") && !strings.Contains(c.text, "-H 'Content-Type: application/json'") {
			t.Errorf("README.md:%d: %s sends JSON without -H 'Content-Type: application/json'", c.line, c.text)
		}
		// Reads are repeated until they match: forwarding runs after the
		// answer, so a receipt may show it pending for a moment.
		reads := !strings.Contains(c.text, " -d ") && !strings.Contains(c.text, " -X")
		deadline := time.Now().Add(15 * time.Second)
		for {
			run := exec.Command("bash", "-o", "pipefail", "-c", toLoopback.Replace(c.text))
			run.Dir, run.Env = work, commandEnv("")
			out, err := run.CombinedOutput()
			got := normal(fromLoopback.Replace(string(out)))
			if err == nil && got == normal(c.output) {
				break
			}
			if !reads || time.Now().After(deadline) {
				t.Errorf("README.md:%d: %s\n%v\ngot:\n%s\nthe README shows:\n%s", c.line, c.text, err, got, normal(c.output))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if serve == nil || sink == nil {
		t.Fatal("the README never starts both the gateway and the sink")
	}
	// The sink's terminal shows what it printed by the end of the walk.
	want := normal(sinkShown.output)
	waitFor(t, "the sink's output shown in README.md", func() bool {
		return normal(fromLoopback.Replace(sink.errOut.String()+sink.out.String())) == want
	})

	checkInlineCommands(t, bin, inline)
}

// checkInlineCommands accounts for every command quoted inline in the
// README: each is run, or checked against the repository where it needs
// what a test does not have (the network, a Docker engine).
func checkInlineCommands(t *testing.T, bin string, inline []string) {
	module, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	modulePath := strings.TrimPrefix(strings.SplitN(string(module), "\n", 2)[0], "module ")
	for _, c := range inline {
		switch {
		case c == "go install "+modulePath+"/cmd/webhookd@latest":
			// Needs the module proxy: check that it names this command.
			out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Name}}", ".").Output()
			if got := strings.TrimSpace(string(out)); err != nil || got != modulePath+"/cmd/webhookd main" {
				t.Errorf("%s: this command is %q (%v)", c, got, err)
			}
		case c == "go build -o webhookd ./cmd/webhookd":
			run := exec.Command("go", "build", "-o", filepath.Join(t.TempDir(), "webhookd"), "./cmd/webhookd")
			run.Dir = "../.."
			if out, err := run.CombinedOutput(); err != nil {
				t.Errorf("%s: %v\n%s", c, err, out)
			}
		case c == "docker build -f docker/Dockerfile -t webhookd .":
			// No Docker engine in the tests: docker/docker_test.go checks the
			// Dockerfile and runs its go build line.
			if _, err := os.Stat("../../docker/Dockerfile"); err != nil {
				t.Errorf("%s: %v", c, err)
			}
		case strings.HasPrefix(c, "webhookd "):
			args := strings.Fields(strings.TrimPrefix(c, "webhookd "))
			if out, err := exec.Command(bin, append(args, "--help")...).CombinedOutput(); err != nil {
				t.Errorf("%s --help: %v\n%s", c, err, out)
			}
		default:
			t.Errorf("README.md quotes the command %q, which this test neither runs nor checks", c)
		}
	}
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#+ (.*)$`)
	mdFence   = regexp.MustCompile("(?s)```.*?```")
	slugDrop  = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// TestDocsLinks checks every relative link of README.md, CONTRIBUTING.md
// and docs/: the file exists, and an anchor names a heading of it, as
// GitHub spells heading anchors.
func TestDocsLinks(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	files := append([]string{"../../README.md", "../../CONTRIBUTING.md"}, docs...)
	anchors := func(path string) map[string]bool {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		set := map[string]bool{}
		for _, m := range mdHeading.FindAllStringSubmatch(mdFence.ReplaceAllString(string(raw), ""), -1) {
			slug := strings.ToLower(strings.NewReplacer("`", "", "*", "").Replace(m[1]))
			set[strings.ReplaceAll(slugDrop.ReplaceAllString(slug, ""), " ", "-")] = true
		}
		return set
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(raw), -1) {
			link := m[1]
			if strings.HasPrefix(link, "http://") || strings.HasPrefix(link, "https://") {
				continue
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := file
			if path != "" {
				target = filepath.Join(filepath.Dir(file), path)
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: link %s: %v", file, link, err)
				continue
			}
			if anchor != "" && !anchors(target)[anchor] {
				t.Errorf("%s: link %s: no heading of %s has the anchor #%s", file, link, target, anchor)
			}
		}
	}
}
