package gateway

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd/recording"
)

func TestRecordsEveryRequestWithItsAnswer(t *testing.T) {
	f := newFixture(t, nil)
	path := filepath.Join(t.TempDir(), "rec", "deliveries.jsonl")
	rec, err := recording.NewFileRecorder(path, []string{"X-Api-Key"}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	f.server.Recorders = map[string]Recorder{"billing": rec, "": rec}

	good := billing("req-1", "sub_1", 1)
	req := httptest.NewRequest(http.MethodPost, "/hooks/billing", strings.NewReader(good))
	req.Header.Set("Authorization", "Bearer provider-secret")
	req.Header.Set("X-Api-Key", "k")
	req.Header.Set("X-Delivery-Id", "dlv-1")
	f.do(req)
	f.post("billing", `not json`)
	f.post("nope", `{}`)
	f.post("plain", `{"items":[{"id":"unrecorded"}]}`) // no recorder for plain
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}

	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var lines []recording.Record
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		var r recording.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, r)
	}
	want := []struct {
		source, decision string
		status           int
	}{{"billing", "accepted", 202}, {"billing", "rejected", 400}, {"nope", "rejected", 404}}
	if len(lines) != len(want) {
		t.Fatalf("recorded %d lines, want %d", len(lines), len(want))
	}
	for i, w := range want {
		if l := lines[i]; l.Source != w.source || l.Decision != w.decision || l.Status != w.status || l.Method != "POST" {
			t.Errorf("line %d = %s %s %d %s, want %+v", i, l.Source, l.Decision, l.Status, l.Method, w)
		}
	}
	first := lines[0]
	if body, _ := base64.StdEncoding.DecodeString(first.BodyBase64); string(body) != good {
		t.Errorf("recorded body = %q", body)
	}
	h := http.Header(first.Headers)
	if h.Get("Authorization") != "REDACTED" || h.Get("X-Api-Key") != "REDACTED" || h.Get("X-Delivery-Id") != "dlv-1" {
		t.Errorf("recorded headers = %v", first.Headers)
	}
	if first.Path != "/hooks/billing" {
		t.Errorf("path = %q", first.Path)
	}
}
