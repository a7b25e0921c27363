package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"testing"
	"time"
)

const limitsConfig = `
max_body: 2048
sources:
  - name: small
    request_id: json:request_id
  - name: big
    request_id: json:request_id
    max_body: 8192
`

// Each source takes bodies up to its own max_body, however they are sent,
// and the 413 says which limit the body broke. Nothing is written for a
// refused body.
func TestEachSourceHasItsOwnBodyLimit(t *testing.T) {
	f := newFixtureFor(t, limitsConfig, nil)
	m := &rejections{}
	f.server.Metrics = m
	base := f.serve(t)
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	defer client.CloseIdleConnections()
	body := func(id string, size int) string {
		b := `{"request_id":"` + id + `","pad":"`
		return b + strings.Repeat("x", size-len(b)-2) + `"}`
	}
	for _, tc := range []struct {
		name, source, id string
		size             int
		chunked          bool
		status           int
		error            string
		label            string
	}{
		{"within the larger source's limit", "big", "b1", 5000, false, 202, "", ""},
		{"within it, chunked", "big", "b2", 5000, true, 202, "", ""},
		{"over the smaller source's limit", "small", "s1", 5000, false, 413, "body is 5000 bytes; source small takes at most 2048", "small/too_large"},
		{"over it, chunked", "small", "s2", 5000, true, 413, "body is 5000 bytes; source small takes at most 2048", "small/too_large"},
		{"over the larger source's limit", "big", "b3", 9000, false, 413, "body is 9000 bytes; source big takes at most 8192", "big/too_large"},
		// fasthttp forgets the path of a chunked body that overruns what
		// the server reads at most: the largest limit of any source.
		{"over every limit, chunked", "big", "b4", 9000, true, 413, "body is over 8192 bytes; no source takes more than 8192", "unknown/too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(body(tc.id, tc.size))
			if tc.chunked {
				r = oneByteReader{r}
			}
			resp, err := client.Post(base+"/hooks/"+tc.source, "application/json", r)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var answer map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
				t.Fatalf("answer is not JSON: %v", err)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("got %d %v, want %d", resp.StatusCode, answer, tc.status)
			}
			if tc.status != 413 {
				return
			}
			if answer["error"] != tc.error || answer["field"] != "body" {
				t.Errorf("413 says %v, want error %q, field body", answer, tc.error)
			}
			if f.hasReceipt(tc.source, tc.id) {
				t.Error("a receipt was written for a body over max_body")
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			if last := m.got[len(m.got)-1]; last != tc.label {
				t.Errorf("rejection counted as %s, want %s", last, tc.label)
			}
		})
	}
}

// A declared body over its source's limit is refused before "100
// Continue", though the server reads larger bodies for other sources.
func TestDeclaredBodyOverItsSourcesLimitIsRefusedBeforeContinue(t *testing.T) {
	f := newFixtureFor(t, limitsConfig, nil)
	base := f.serve(t)
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	defer client.CloseIdleConnections()
	var continued []string
	for _, source := range []string{"small", "big"} {
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got100Continue: func() { continued = append(continued, source) }})
		body := `{"request_id":"r","pad":"` + strings.Repeat("x", 5000) + `"}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/hooks/"+source, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Expect", "100-continue")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[string]int{"small": 413, "big": 202}[source]; resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", source, resp.StatusCode, want)
		}
	}
	if !slices.Equal(continued, []string{"big"}) {
		t.Errorf("100 Continue for %v, want big only", continued)
	}
}
