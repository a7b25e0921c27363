package sink

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/webhookd/webhookd/recording"
	"github.com/webhookd/webhookd/signature"
	"github.com/webhookd/webhookd/versioning"
)

// maxBody bounds what the sink reads of a request; webhookd's own limit is
// far lower.
const maxBody = 32 << 20

// Config configures a sink.
type Config struct {
	Listen string // host:port; port 0 picks a free one
	// Record, when set, appends every request to this file in the replay
	// format, with Authorization and the headers named in Redact redacted:
	// forwarding may carry configured credentials.
	Record string
	Redact []string
	// FailFirst fails the first N requests of each Idempotency-Key with 503.
	FailFirst int
	// FailRate fails this share (0 to 1) of requests with 503, at random.
	FailRate float64
	// Status answers every request that is not failed otherwise; 0 is 200.
	Status int
	// Latency delays every answer.
	Latency time.Duration
	// VerifySecret, when set, is the Standard Webhooks secret (whsec_...)
	// that signed forwarding uses; a request without a valid signature is
	// answered 401.
	VerifySecret string
}

// Stats is what the sink saw.
type Stats struct {
	Requests int            `json:"requests"`
	Keys     map[string]int `json:"keys"` // arrivals per Idempotency-Key
	// OutOfOrder lists versions that arrived after a newer version of the
	// same resource had been taken.
	OutOfOrder     []OutOfOrder `json:"out_of_order"`
	BadSignatures  int          `json:"bad_signatures"`
	FailedInjected int          `json:"failed_injected"` // failed on purpose: fail-first, fail-rate, or a non-2xx status
}

// OutOfOrder is one version that came after a newer one.
type OutOfOrder struct {
	Source   string `json:"source,omitempty"`
	Resource string `json:"resource"`
	Version  string `json:"version"`
	After    string `json:"after"` // the newer version taken before it
	Key      string `json:"key,omitempty"`
}

// Server is the sink.
type Server struct {
	cfg      Config
	out      io.Writer
	logger   *zap.Logger
	verifier signature.Verifier // nil without a secret
	recorder *recording.FileRecorder

	mu      sync.Mutex // guards the counts below and writes to out
	stats   Stats
	keyless int               // requests without an Idempotency-Key
	latest  map[string]string // newest version taken, by source and resource

	ln  net.Listener
	srv *http.Server
}

// NewServer checks cfg and returns a sink that prints a line per request
// to out. It opens the recording file, if any; Open binds the listener.
func NewServer(cfg Config, out io.Writer, logger *zap.Logger) (*Server, error) {
	switch {
	case cfg.FailFirst < 0:
		return nil, fmt.Errorf("fail-first: must not be negative (got %d)", cfg.FailFirst)
	case cfg.FailRate < 0 || cfg.FailRate > 1:
		return nil, fmt.Errorf("fail-rate: must be between 0 and 1 (got %g)", cfg.FailRate)
	case cfg.Status != 0 && (cfg.Status < 200 || cfg.Status > 599):
		return nil, fmt.Errorf("status: must be an HTTP status from 200 to 599 (got %d)", cfg.Status)
	case cfg.Latency < 0:
		return nil, fmt.Errorf("latency: must not be negative (got %s)", cfg.Latency)
	}
	s := &Server{
		cfg:    cfg,
		out:    out,
		logger: logger,
		stats:  Stats{Keys: map[string]int{}, OutOfOrder: []OutOfOrder{}},
		latest: map[string]string{},
	}
	if cfg.VerifySecret != "" {
		v, err := signature.New(signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{cfg.VerifySecret}})
		if err != nil {
			return nil, fmt.Errorf("verify-secret: %w", err)
		}
		s.verifier = v
	}
	if cfg.Record != "" {
		rec, err := recording.NewFileRecorder(cfg.Record, cfg.Redact, logger)
		if err != nil {
			rec.Close()
			return nil, err
		}
		s.recorder = rec
	}
	return s, nil
}

// Open binds the listener, so that a bad address fails here, then serves
// in the background.
func (s *Server) Open() error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Listen, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("serve", zap.String("addr", ln.Addr().String()), zap.Error(err))
		}
	}()
	return nil
}

// Addr returns the bound address; URL the sink's base URL.
func (s *Server) Addr() string { return s.ln.Addr().String() }
func (s *Server) URL() string  { return "http://" + s.Addr() }

// Shutdown stops taking requests, waits until ctx ends for those in flight,
// then closes the recording.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	if s.srv != nil {
		err = s.srv.Shutdown(ctx)
	}
	if s.recorder != nil {
		err = errors.Join(err, s.recorder.Close())
	}
	return err
}

// Close stops the sink at once, dropping requests in flight, then closes
// the recording.
func (s *Server) Close() error {
	var err error
	if s.srv != nil {
		err = s.srv.Close()
	}
	if s.recorder != nil {
		err = errors.Join(err, s.recorder.Close())
	}
	return err
}

// Stats returns a copy of the counts.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Keys = maps.Clone(s.stats.Keys)
	st.OutOfOrder = append([]OutOfOrder{}, s.stats.OutOfOrder...)
	return st
}

// ServeHTTP answers GET /stats, and takes every other request as a
// delivery.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/stats" {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.Stats())
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if s.cfg.Latency > 0 {
		t := time.NewTimer(s.cfg.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	// Verify before taking the lock: it is the one slow step.
	var sigErr error
	if s.verifier != nil {
		sigErr = s.verifier.Verify(r.Header, body, time.Now())
	}
	status, note := s.take(r, len(body), sigErr)

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	answer := map[string]any{"status": status}
	if note != "" {
		answer["note"] = note
	}
	json.NewEncoder(w).Encode(answer)

	if s.recorder != nil {
		s.recorder.Record(recording.Record{
			Time:       time.Now(),
			Source:     r.Header.Get("Webhook-Source"),
			Method:     r.Method,
			Path:       r.URL.RequestURI(),
			Headers:    r.Header.Clone(),
			BodyBase64: base64.StdEncoding.EncodeToString(body),
			Status:     status,
		})
	}
}

// take counts one delivery, decides its answer and prints its line.
func (s *Server) take(r *http.Request, size int, sigErr error) (status int, note string) {
	key := r.Header.Get("Idempotency-Key")
	source, resource, version := r.Header.Get("Webhook-Source"), r.Header.Get("Webhook-Resource"), r.Header.Get("Webhook-Version")

	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Requests++
	n := s.keyless + 1
	if key != "" {
		s.stats.Keys[key]++
		n = s.stats.Keys[key]
	} else {
		s.keyless++
	}
	status = cmp.Or(s.cfg.Status, http.StatusOK)
	switch {
	case sigErr != nil:
		status, note = http.StatusUnauthorized, "bad signature: "+sigErr.Error()
		s.stats.BadSignatures++
	case n <= s.cfg.FailFirst:
		status, note = http.StatusServiceUnavailable, fmt.Sprintf("injected failure %d of %d", n, s.cfg.FailFirst)
		s.stats.FailedInjected++
	case s.cfg.FailRate > 0 && rand.Float64() < s.cfg.FailRate:
		status, note = http.StatusServiceUnavailable, "injected failure (fail-rate)"
		s.stats.FailedInjected++
	case status >= 300:
		note = "injected status"
		s.stats.FailedInjected++
	case resource != "" && version != "":
		// Only a taken (2xx) version counts: a failed one is sent again.
		id := source + "\x00" + resource
		prev, seen := s.latest[id]
		switch c := compareVersions(version, prev); {
		case seen && c < 0:
			s.stats.OutOfOrder = append(s.stats.OutOfOrder, OutOfOrder{Source: source, Resource: resource, Version: version, After: prev, Key: key})
			note = fmt.Sprintf("OUT OF ORDER: %s version %s after %s", resource, version, prev)
		case !seen || c > 0:
			s.latest[id] = version
		}
	}
	line := fmt.Sprintf("%s %s key=%s version=%s bytes=%d -> %d", r.Method, r.URL.RequestURI(), orDash(key), orDash(version), size, status)
	if note != "" {
		line += "  " + note
	}
	fmt.Fprintln(s.out, line)
	return status, note
}

// compareVersions orders two versions as webhookd does: as integers when
// both are, else as RFC 3339 times when both are, else as strings.
func compareVersions(a, b string) int {
	for _, f := range []versioning.Format{versioning.Integer, versioning.Timestamp} {
		if x, err := versioning.Parse(f, a); err == nil {
			if y, err := versioning.Parse(f, b); err == nil {
				return cmp.Compare(x, y)
			}
		}
	}
	return strings.Compare(a, b)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
