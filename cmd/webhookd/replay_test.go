package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/recording"
	"github.com/webhookd/webhookd/replay"
	"github.com/webhookd/webhookd/sink"
)

// recordings holds the shipped recordings and the configuration of the
// gateway they were made against.
const recordings = "../../testdata/recordings/"

var recordingsConfig = recordings + "webhookd.yaml"

// startSink runs a real sink on loopback that checks signed forwarding
// with the shipped configuration's forwarding secret.
func startSink(t *testing.T) *sink.Server {
	t.Helper()
	cfg, err := configs.Load(recordingsConfig)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sink.NewServer(sink.Config{Listen: "127.0.0.1:0", VerifySecret: cfg.Sources[0].Routes[0].Sign.Secret}, io.Discard, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startRecordingsGateway runs the gateway of the shipped configuration on
// free loopback ports and a fresh data directory, forwarding to down.
func startRecordingsGateway(t *testing.T, down *sink.Server) *client {
	t.Helper()
	cfg, err := configs.Load(recordingsConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.Admin.Listen, cfg.Admin.Token, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", adminToken, t.TempDir()
	for _, s := range cfg.Sources {
		for i := range s.Routes {
			r := &s.Routes[i]
			u, err := url.Parse(r.URL)
			if err != nil {
				t.Fatal(err)
			}
			r.URL = down.URL() + u.Path
		}
	}
	m := NewMain(cfg, zaptest.NewLogger(t))
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return &client{t: t, public: m.Server.PublicAddr(), admin: m.Server.AdminAddr()}
}

// replayCmd runs `webhookd replay args...` in process and returns what it
// printed.
func replayCmd(args ...string) (string, error) {
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"replay"}, args...))
	err := root.Execute()
	return out.String(), err
}

func readReport(t *testing.T, path string) replay.Report {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r replay.Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestShippedRecordingsReplay replays each shipped recording, re-signed,
// against a fresh gateway that forwards to a real sink: every line must get
// the decision and status it records, every accepted request must reach the
// sink with a valid forwarding signature, and nothing else may.
func TestShippedRecordingsReplay(t *testing.T) {
	for _, tc := range []struct {
		file      string
		forwarded []string // request IDs of the accepted lines
	}{
		{"stripe-retries.jsonl", []string{"evt_1ReplayInvoicePaid", "evt_1ReplaySubUpdated"}},
		{"out-of-order.jsonl", []string{"ooo-1", "ooo-3", "ooo-4"}},
		{"reused-request-id.jsonl", []string{"reuse-1", "reuse-2"}},
		{"signed.jsonl", []string{"msg_2Replay0001", "msg_2Replay0002"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			down := startSink(t)
			c := startRecordingsGateway(t, down)
			reportPath := filepath.Join(t.TempDir(), "report.json")
			out, err := replayCmd("--file", recordings+tc.file, "--target", "http://"+c.public,
				"--config", recordingsConfig, "--expect", "--report", reportPath)
			if err != nil {
				t.Fatalf("replay: %v\n%s", err, out)
			}
			lines, torn, err := recording.ReadFile(recordings + tc.file)
			if err != nil || len(torn) > 0 {
				t.Fatal(err, torn)
			}
			report := readReport(t, reportPath)
			if report.Summary.Deliveries != len(lines) || report.Summary.Mismatches != 0 || len(report.Results) != len(lines) {
				t.Errorf("report summary %+v for %d lines", report.Summary, len(lines))
			}
			for i, r := range report.Results {
				if r.Decision != lines[i].Decision || r.Status != lines[i].Status {
					t.Errorf("line %d: got %s %d, recorded %s %d", r.Line, r.Decision, r.Status, lines[i].Decision, lines[i].Status)
				}
				// --report names every decided line's request ID.
				if r.Decision != recording.Rejected && r.RequestID == "" {
					t.Errorf("line %d: the report names no request ID: %+v", r.Line, r)
				}
			}

			waitFor(t, "empty outbox", func() bool { return len(c.items("/admin/outbox")) == 0 })
			st := down.Stats()
			if keys := slices.Sorted(maps.Keys(st.Keys)); !slices.Equal(keys, tc.forwarded) {
				t.Errorf("sink got %v, want exactly the accepted %v", st.Keys, tc.forwarded)
			}
			if len(st.OutOfOrder) != 0 || st.BadSignatures != 0 {
				t.Errorf("sink stats %+v: want no stale version after a newer one and valid signatures", st)
			}
		})
	}
}

// TestSignedRecordingFailsWithoutResigning shows why --config exists: the
// recorded signatures are years old, so a verifying gateway refuses them.
func TestSignedRecordingFailsWithoutResigning(t *testing.T) {
	down := startSink(t)
	c := startRecordingsGateway(t, down)
	out, err := replayCmd("--file", recordings+"signed.jsonl", "--target", "http://"+c.public, "--expect")
	if !errors.Is(err, replay.ErrFailed) {
		t.Fatalf("err = %v, want a failed replay\n%s", err, out)
	}
	if !regexp.MustCompile(`rejected\s+401\s+5\n`).MatchString(out) {
		t.Errorf("want all 5 deliveries rejected with 401:\n%s", out)
	}
	if n := down.Stats().Requests; n != 0 {
		t.Errorf("the sink got %d requests", n)
	}
}

// TestReplayWrongExpectationExitsOne runs the real binary, as a CI job
// would, on a recording whose second line expects the wrong decision.
func TestReplayWrongExpectationExitsOne(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	_, down := newRecorder(t)
	m, c := startMain(t, testConfig(t, t.TempDir(), down.URL, "127.0.0.1:0", "127.0.0.1:0"))
	defer m.Close(context.Background())
	file := filepath.Join(t.TempDir(), "wrong.jsonl")
	body := billing("req-w1", "sub_w", 1)
	writeLines(t, file,
		fmt.Sprintf(`{"path":"/hooks/billing","body":%q,"decision":"accepted","status":202}`, body),
		fmt.Sprintf(`{"path":"/hooks/billing","body":%q,"decision":"stale","status":200}`, body), // it is a duplicate
	)
	cmd := exec.Command(bin, "replay", "--file", file, "--target", "http://"+c.public, "--expect", "--progress-every", "1ns")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if !regexp.MustCompile(`(?m)^2\s+req-w1\s+POST /hooks/billing\s+stale 200\s+duplicate 200$`).MatchString(stdout.String()) {
		t.Errorf("no diff row for line 2:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "1 mismatches") {
		t.Errorf("stderr: %s", stderr.String())
	}
	// stderr is a pipe: progress comes as plain lines, none redrawn.
	if !regexp.MustCompile(`(?m)^2/2 sent \(100%\)  \S+/s  1 mismatch  0 errors  done$`).MatchString(stderr.String()) || strings.Contains(stderr.String(), "\r") {
		t.Errorf("stderr lacks the last progress line, or redraws one:\n%q", stderr.String())
	}
}

func TestReplayTargetDownReportsEachLine(t *testing.T) {
	reportPath := filepath.Join(t.TempDir(), "report.json")
	out, err := replayCmd("--file", recordings+"out-of-order.jsonl", "--target", "http://"+freeAddr(t), "--expect", "--report", reportPath)
	if !errors.Is(err, replay.ErrFailed) {
		t.Fatalf("err = %v\n%s", err, out)
	}
	report := readReport(t, reportPath)
	if len(report.Results) != 7 || report.Summary.Errors != 7 {
		t.Fatalf("summary %+v, want 7 errors", report.Summary)
	}
	for _, r := range report.Results {
		if r.Decision != replay.Failed || !strings.Contains(r.Error, "connection refused") {
			t.Errorf("line %d: %+v", r.Line, r)
		}
	}
	if n := strings.Count(out, "connection refused"); n != 7 {
		t.Errorf("%d error rows printed, want 7:\n%s", n, out)
	}
}

func TestReplayRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	writeLines(t, bad, `{"path":"/hooks/billing"}`, `{"path":"/hooks/billing","decison":"accepted"}`)
	empty := filepath.Join(dir, "empty.jsonl")
	writeLines(t, empty)
	good := recordings + "out-of-order.jsonl"
	target := "http://" + freeAddr(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", target}, `required flag(s) "file" not set`},
		{[]string{"--file", good}, `required flag(s) "target" not set`},
		{[]string{"--file", good, "--target", "localhost:8080"}, "target:"},
		{[]string{"--file", filepath.Join(dir, "missing.jsonl"), "--target", target}, "read recording"},
		{[]string{"--file", bad, "--target", target}, `line 2: parse json: json: unknown field "decison"`},
		{[]string{"--file", empty, "--target", target}, "holds no deliveries"},
		{[]string{"--file", good, "--target", target, "--rate", "fast"}, "rate:"},
		{[]string{"--file", good, "--target", target, "--rate", "NaN"}, "rate:"},
		{[]string{"--file", good, "--target", target, "--rate", "Inf"}, "rate:"},
		{[]string{"--file", good, "--target", target, "--timeout", "-1s"}, "timeout:"},
		{[]string{"--file", good, "--target", target, "--concurrency", "-2"}, "concurrency:"},
		{[]string{"--file", good, "--target", target, "--config", filepath.Join(dir, "none.yaml")}, "read config"},
		{[]string{"--file", good, "--target", target, "--config", recordingsConfig, "--source", "nope"}, `source: "nope" is not in the configuration`},
		{[]string{"--file", good, "--target", target, "--source", "nope"}, `no line of`},
		{[]string{"--file", good, "--target", target, "extra"}, "unknown command"},
	} {
		out, err := replayCmd(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q\n%s", tc.args, err, tc.want, out)
		}
	}
}

func writeLines(t *testing.T, path string, lines ...string) {
	t.Helper()
	var data []byte
	for _, l := range lines {
		data = append(data, l+"\n"...)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestGatewayRecordingReplaysOnAFreshGateway records real traffic with the
// gateway's own recorder, rejected requests included, and replays the
// recording against a fresh gateway: every decision and status must come
// out the same.
func TestGatewayRecordingReplaysOnAFreshGateway(t *testing.T) {
	_, down := newRecorder(t)
	path := filepath.Join(t.TempDir(), "recordings", "deliveries.jsonl")
	config := func() string {
		return testConfig(t, t.TempDir(), down.URL, "127.0.0.1:0", "127.0.0.1:0") +
			fmt.Sprintf("record: { path: %q, redact: [X-Secret] }\n", path)
	}
	m, c := startMain(t, config())
	secrets := map[string]string{"Authorization": "Bearer live", "X-Secret": "s3cret"}
	for _, step := range []struct {
		method, source, body string
		status               int
	}{
		{"POST", "billing", billing("req-1", "sub_1", 2), 202},
		{"POST", "billing", billing("req-1", "sub_1", 2), 200}, // duplicate
		{"POST", "billing", billing("req-2", "sub_1", 1), 200}, // stale
		{"POST", "billing", billing("req-1", "sub_1", 3), 422}, // conflict
		{"POST", "billing", `{"request_id":`, 400},             // not JSON: rejected
		{"POST", "nowhere", `{}`, 404},                         // unknown source: rejected
		{"GET", "billing", ``, 405},                            // wrong method: rejected
	} {
		if status, body := c.send(step.method, "http://"+c.public+"/hooks/"+step.source, step.body, secrets); status != step.status {
			t.Fatalf("%s %s: %d %v, want %d", step.method, step.body, status, body, step.status)
		}
	}
	if err := m.Close(context.Background()); err != nil { // flushes the recording
		t.Fatal(err)
	}

	lines, torn, err := recording.ReadFile(path)
	if err != nil || len(torn) > 0 {
		t.Fatal(err, torn)
	}
	var decisions []string
	for _, l := range lines {
		decisions = append(decisions, fmt.Sprint(l.Decision, " ", l.Status))
		for name, values := range l.Headers {
			if (strings.EqualFold(name, "Authorization") || strings.EqualFold(name, "X-Secret")) && values[0] != recording.Redacted {
				t.Errorf("line %d: %s recorded as %q", l.N, name, values[0])
			}
		}
	}
	want := []string{"accepted 202", "duplicate 200", "stale 200", "conflict 422", "rejected 400", "rejected 404", "rejected 405"}
	if !slices.Equal(decisions, want) {
		t.Fatalf("recorded %v, want %v", decisions, want)
	}

	m, c = startMain(t, config()) // a fresh data directory, recording to the same file
	defer m.Close(context.Background())
	out, err := replayCmd("--file", path, "--target", "http://"+c.public, "--expect")
	if err != nil {
		t.Fatalf("replay of the gateway's own recording: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`mismatches\s+0\n`).MatchString(out) {
		t.Errorf("summary:\n%s", out)
	}
}

// Sources that record to one file, whatever its path's spelling, share
// one recorder, and it redacts what any of them asks for.
func TestSharedRecordingRedactsForEverySource(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for name, spelling := range map[string]string{
		"dot-dot": dir + "/sub/../deliveries.jsonl", // filepath.Join would clean it
		"symlink": filepath.Join(link, "deliveries.jsonl"),
	} {
		t.Run(name, func(t *testing.T) {
			_, down := newRecorder(t)
			path := filepath.Join(dir, "deliveries.jsonl")
			os.Remove(path)
			config := strings.Replace(testConfig(t, t.TempDir(), down.URL, "127.0.0.1:0", "127.0.0.1:0"),
				"request_id: header:Idempotency-Key\n",
				fmt.Sprintf("request_id: header:Idempotency-Key\n    record: { path: %q, redact: [X-Api-Key] }\n", spelling), 1) +
				fmt.Sprintf("record: { path: %q }\n", path)
			m, c := startMain(t, config)
			headers := map[string]string{"Idempotency-Key": "req-1", "X-Api-Key": "sk_live_secret"}
			if status, body := c.send("POST", "http://"+c.public+"/hooks/audit", `{}`, headers); status != 202 {
				t.Fatalf("audit: %d %v", status, body)
			}
			if status, body := c.send("POST", "http://"+c.public+"/hooks/billing", billing("req-2", "sub_1", 1), headers); status != 202 {
				t.Fatalf("billing: %d %v", status, body)
			}
			if err := m.Close(context.Background()); err != nil { // flushes the recording
				t.Fatal(err)
			}
			if n := len(m.recorders); n != 1 {
				t.Errorf("%d recorders, want one for the one file", n)
			}
			lines, torn, err := recording.ReadFile(path)
			if err != nil || len(lines) != 2 || len(torn) > 0 {
				t.Fatalf("recording: %d lines, %d torn, %v; want both deliveries in one file", len(lines), len(torn), err)
			}
			for _, l := range lines {
				for name, values := range l.Headers {
					if strings.EqualFold(name, "X-Api-Key") && values[0] != recording.Redacted {
						t.Errorf("line %d (%s): %s recorded as %q", l.N, l.Source, name, values[0])
					}
				}
			}
		})
	}
}

// TestSinkCommand runs the real binary's sink: it serves once started,
// prints a line per request, and exits cleanly on SIGTERM; bad flags fail.
func TestSinkCommand(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "sink", "--fail-rate", "2").CombinedOutput(); err == nil || !strings.Contains(string(out), "fail-rate: must be between 0 and 1") {
		t.Errorf("bad --fail-rate: %v\n%s", err, out)
	}

	addr := freeAddr(t)
	cmd := exec.Command(bin, "sink", "--listen", addr, "--status", "202")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd}
	t.Cleanup(p.kill)
	c := &client{t: t, public: addr}
	waitFor(t, "sink", func() bool {
		resp, err := http.Get("http://" + addr + "/stats")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	if status, _ := c.send("POST", "http://"+addr+"/orders", `{"id":1}`, map[string]string{"Idempotency-Key": "k-1", "Webhook-Version": "7"}); status != 202 {
		t.Errorf("status %d, want --status 202", status)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("sink after SIGTERM: %v", err)
	}
	if want := "POST /orders key=k-1 version=7 bytes=8 -> 202\n"; stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
}

func TestProgressLine(t *testing.T) {
	at := func(sent int, elapsed time.Duration) replay.Progress {
		return replay.Progress{Sent: sent, Total: 6, Elapsed: elapsed}
	}
	feed := func(l *progressLine) {
		for i, e := range []time.Duration{time.Second, time.Second + 50*time.Millisecond, 10 * time.Second, 12 * time.Second, 21 * time.Second, 25 * time.Second} {
			l.update(at(i+1, e))
		}
		l.finish()
	}

	// Not a terminal: a plain line each interval, the last one included.
	var plain bytes.Buffer
	l := newProgressLine(&plain, 10*time.Second)
	if l.terminal {
		t.Fatal("a buffer taken for a terminal")
	}
	feed(l)
	if want := at(3, 10*time.Second).String() + "\n" + at(5, 21*time.Second).String() + "\n"; plain.String() != want {
		t.Errorf("plain lines:\n%q\nwant:\n%q", plain.String(), want)
	}
	var none bytes.Buffer
	feed(newProgressLine(&none, 0))
	if none.Len() != 0 {
		t.Errorf("--progress-every 0 printed %q", none.String())
	}

	// A terminal: one line redrawn in place, at most every redraw, and
	// always at the end.
	var term bytes.Buffer
	feed(&progressLine{w: &term, terminal: true})
	var want strings.Builder
	for _, p := range []replay.Progress{at(1, time.Second), at(3, 10*time.Second), at(4, 12*time.Second), at(5, 21*time.Second), at(6, 25*time.Second)} {
		want.WriteString("\r" + p.String() + "\x1b[K")
	}
	want.WriteString("\n")
	if term.String() != want.String() {
		t.Errorf("terminal:\n%q\nwant:\n%q", term.String(), want.String())
	}
}
