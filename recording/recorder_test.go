package recording

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/store"
)

// Recorder is what the gateway needs of a recorder; both kinds fit.
type Recorder interface{ Record(Record) }

var (
	_ Recorder = (*FileRecorder)(nil)
	_ Recorder = Discard
)

func sample(i int, decision string, status int, headers map[string][]string) Record {
	body := fmt.Sprintf(`{"request_id":"req-%d"}`, i)
	return Record{
		Source:     "billing",
		Method:     "POST",
		Path:       "/hooks/billing",
		Headers:    headers,
		BodyBase64: base64.StdEncoding.EncodeToString([]byte(body)),
		Status:     status,
		Decision:   decision,
	}
}

func TestRecorderRedactsAndKeepsRejectedRequests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nested", "dir", "deliveries.jsonl")
	r, err := NewFileRecorder(path, []string{"x-secret"}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	r.Record(sample(1, "accepted", 202, map[string][]string{
		"Authorization":     {"Bearer live-token"},
		"X-SECRET":          {"one", "two"},
		"Webhook-Signature": {"v1,abc"},
	}))
	r.Record(sample(2, Rejected, 401, map[string][]string{"authorization": {"Basic Zm9vOmJhcg=="}}))
	// No source: taken from the path. A raw body: written as body_base64.
	r.Record(Record{Path: "/hooks/audit", Body: "not json", Status: 400, Decision: Rejected})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if r.Dropped() != 0 || r.Failed() != 0 {
		t.Errorf("dropped %d, failed %d", r.Dropped(), r.Failed())
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("recording mode %v, want 0600: it holds request bodies", info.Mode().Perm())
	}

	lines, torn, err := ReadFile(path)
	if err != nil || len(torn) > 0 {
		t.Fatal(err, torn)
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3", len(lines))
	}
	first := lines[0].Headers
	if first["Authorization"][0] != Redacted || first["X-SECRET"][0] != Redacted || first["X-SECRET"][1] != Redacted {
		t.Errorf("secrets not redacted: %v", first)
	}
	if first["Webhook-Signature"][0] != "v1,abc" {
		t.Errorf("a header not named for redaction was changed: %v", first)
	}
	if lines[0].Time.IsZero() || time.Since(lines[0].Time) > time.Hour {
		t.Errorf("time = %v, want the time of the Record call", lines[0].Time)
	}
	if body, _ := lines[0].Payload(); string(body) != `{"request_id":"req-1"}` {
		t.Errorf("body = %q", body)
	}
	if l := lines[1]; l.Decision != Rejected || l.Status != 401 || l.Headers["authorization"][0] != Redacted {
		t.Errorf("rejected request recorded as %+v", l.Record)
	}
	if body, _ := lines[2].Payload(); lines[2].Source != "audit" || lines[2].Body != "" || string(body) != "not json" {
		t.Errorf("line with a text body and no source recorded as %+v", lines[2].Record)
	}

	// A second recorder appends.
	r, err = NewFileRecorder(path, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	r.Record(sample(4, "duplicate", 200, nil))
	r.Close()
	r.Record(sample(5, "duplicate", 200, nil)) // after Close: dropped, not a panic
	if lines, torn, _ := ReadFile(path); len(lines) != 4 || len(torn) > 0 {
		t.Errorf("%d lines after a second recorder, want 4 (appended)", len(lines))
	}
	if r.Dropped() != 1 {
		t.Errorf("a record after Close: dropped = %d, want 1", r.Dropped())
	}
}

func TestRecorderBadPathNeverFailsTheCaller(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "not-a-dir")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(blocker, "deliveries.jsonl") // its directory cannot be created: a file is in the way
	core, logs := observer.New(zapcore.InfoLevel)
	r, err := NewFileRecorder(path, nil, zap.New(core))
	if err == nil || !strings.Contains(err.Error(), "create directory") {
		t.Fatalf("err = %v, want the directory problem", err)
	}
	for i := range 3 {
		r.Record(sample(i, "accepted", 202, nil)) // returns: the caller is never held up
	}

	// Once the path becomes usable, the recorder opens it on its own.
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the recorder never opened the path once it could")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.Record(sample(9, "accepted", 202, nil))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if r.Failed() != 3 {
		t.Errorf("failed = %d, want the 3 records made while the path was bad", r.Failed())
	}
	if lines, torn, err := ReadFile(path); err != nil || len(lines) != 1 || len(torn) > 0 {
		t.Errorf("after recovery: %d lines, %v; want 1", len(lines), err)
	}
	if logs.FilterMessage("recording lost lines").Len() == 0 || logs.FilterMessage("recording resumed").Len() == 0 {
		t.Errorf("logged %v, want the losses and the recovery", logs.All())
	}
}

func TestRecorderFullDiskIsLoggedAndCounted(t *testing.T) {
	const full = "/dev/full" // every write fails with ENOSPC
	if _, err := os.Stat(full); err != nil {
		t.Skip("no /dev/full here")
	}
	core, logs := observer.New(zapcore.InfoLevel)
	r, err := NewFileRecorder(full, nil, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		r.Record(sample(i, "accepted", 202, nil))
	}
	r.Close() // the final flush fails too; Close may say so
	if r.Failed() != 5 {
		t.Errorf("failed = %d, want 5", r.Failed())
	}
	failed := logs.FilterMessage("recording failed; deliveries go on unrecorded").All()
	if len(failed) != 1 || !strings.Contains(fmt.Sprint(failed[0].ContextMap()["error"]), "no space left") {
		t.Errorf("want one error log naming the full disk, got %v", logs.All())
	}
}

// TestRecorderDropsWhenTheWriterFallsBehind blocks the writer on a pipe
// nobody reads, so the queue fills: Record must go on returning, and every
// record must end up either written or counted.
func TestRecorderDropsWhenTheWriterFallsBehind(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	r, err := NewFileRecorder(fifo, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	const total = 3 * queueSize // far more than the pipe and the queue hold
	for i := range total {
		r.Record(sample(i, "accepted", 202, map[string][]string{"X-Pad": {strings.Repeat("p", 200)}}))
	}
	if r.Dropped() == 0 {
		t.Fatal("nothing dropped although the writer is blocked")
	}
	read := make(chan int)
	go func() {
		lines := 0
		rd := NewReader(reader)
		for {
			if _, err := rd.Next(); err != nil {
				read <- lines
				return
			}
			lines++
		}
	}()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	written := <-read
	if got := uint64(written) + r.Dropped() + r.Failed(); got != total {
		t.Errorf("written %d + dropped %d + failed %d = %d, want %d", written, r.Dropped(), r.Failed(), got, total)
	}
}

// BenchmarkRecord measures what recording adds to a delivery: building the
// record as the gateway does (copying the headers and the body) and handing
// it over, with the body base64-encoded by the caller or, as Body, by the
// writer; and, for scale, the durable decision the gateway makes for every
// delivery, without and with recording. encode is the writer's work per
// line. lost/op counts records dropped because the writer fell behind.
func BenchmarkRecord(b *testing.B) {
	body := []byte(fmt.Sprintf(`{"request_id":"req-1","pad":%q}`, strings.Repeat("x", 1000)))
	headers := map[string][]string{
		"Content-Type": {"application/json"}, "User-Agent": {"Stripe/1.0"}, "Accept": {"*/*"},
		"Stripe-Signature": {"t=1700000000,v1=" + strings.Repeat("a", 64)}, "X-Delivery-Id": {"dlv_1"},
		"Authorization": {"Bearer x"}, "Content-Length": {"1030"}, "Host": {"hooks.example.com"},
	}
	build := map[string]func() Record{
		"base64-by-caller": func() Record {
			return Record{Source: "billing", Method: "POST", Path: "/hooks/billing", Headers: maps.Clone(headers),
				BodyBase64: base64.StdEncoding.EncodeToString(body), Status: 202, Decision: "accepted"}
		},
		"base64-by-writer": func() Record {
			return Record{Source: "billing", Method: "POST", Path: "/hooks/billing", Headers: maps.Clone(headers),
				Body: string(body), Status: 202, Decision: "accepted"}
		},
	}
	newRecorder := func(b *testing.B) *FileRecorder {
		r, err := NewFileRecorder(filepath.Join(b.TempDir(), "bench.jsonl"), []string{"X-Secret"}, zap.NewNop())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			r.Close()
			b.ReportMetric(float64(r.Dropped()+r.Failed())/float64(b.N), "lost/op")
		})
		return r
	}

	b.Run("encode", func(b *testing.B) { // the writer's work per line
		rec, line := build["base64-by-caller"](), []byte(nil)
		b.ReportAllocs()
		for b.Loop() {
			line, _ = appendRecord(line[:0], &rec)
		}
	})
	for _, how := range []string{"base64-by-caller", "base64-by-writer"} {
		b.Run("record/"+how, func(b *testing.B) {
			r := newRecorder(b)
			b.ReportAllocs()
			for b.Loop() {
				r.Record(build[how]())
			}
		})
	}
	for _, how := range []string{"off", "base64-by-caller", "base64-by-writer"} {
		b.Run("decide/recording="+how, func(b *testing.B) {
			s := store.New(b.TempDir())
			s.Logger = zap.NewNop()
			if err := s.Open(); err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			r := newRecorder(b)
			var n atomic.Int64
			b.SetParallelism(32) // in-flight deliveries per CPU, as under load
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					d := webhookd.Delivery{Source: "billing", RequestID: fmt.Sprint("req-", i), Fingerprint: "f", ReceivedAt: time.Now()}
					if _, err := s.Decide(context.Background(), d); err != nil {
						b.Error(err)
						return
					}
					if how != "off" {
						r.Record(build[how]())
					}
				}
			})
		})
	}
}

// Lines reach the file whole: one that does not fit in what is left of the
// buffer goes after a flush, not across one, so a process killed between
// two writes leaves no part of a line behind.
func TestRecorderWritesWholeLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deliveries.jsonl")
	r, err := NewFileRecorder(path, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pad := strings.Repeat("p", 1500)
	for i := range 100 { // about 160 KiB: more than two buffers
		r.Record(sample(i, "accepted", 202, map[string][]string{"X-Pad": {pad}}))
	}
	// Well before the timed flush, a second after the start: what the file
	// holds is what full buffers wrote.
	time.Sleep(300 * time.Millisecond)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 64<<10 || data[len(data)-1] != '\n' {
		t.Errorf("the file holds %d bytes, ending in %q: want whole lines from full buffers", len(data), data[max(0, len(data)-20):])
	}
}

// A recording cut short mid-line (a machine that lost power) is taken up
// on a line of its own, and the reader skips the torn line and names it.
func TestRecordingTakenUpAfterATornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deliveries.jsonl")
	whole, err := appendRecord(nil, new(sample(1, "accepted", 202, nil)))
	if err != nil {
		t.Fatal(err)
	}
	torn := whole[:len(whole)/2]
	if err := os.WriteFile(path, append(whole, torn...), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := NewFileRecorder(path, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	r.Record(sample(3, "accepted", 202, nil))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	lines, skipped, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 || lines[0].N != 1 || lines[1].N != 3 || len(skipped) != 1 || skipped[0] != 2 {
		t.Errorf("read %d lines %v, skipped %v as torn; want lines 1 and 3, line 2 skipped", len(lines), lines, skipped)
	}
}
