package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/versioning"
)

var ctx = context.Background()

// openStore opens a store in dir, after set has changed its settings.
func openStore(t *testing.T, dir string, set ...func(*Store)) *Store {
	t.Helper()
	s := New(dir)
	s.Logger = zaptest.NewLogger(t)
	for _, f := range set {
		f(s)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func delivery(requestID, deliveryID, body string) webhookd.Delivery {
	fp, _ := dedupe.Fingerprint([]byte(body), nil)
	return webhookd.Delivery{
		Source:      "billing",
		RequestID:   requestID,
		DeliveryID:  deliveryID,
		Fingerprint: fp,
		ReceivedAt:  time.Now(),
		Forward:     true,
		Body:        []byte(body),
		ContentType: "application/json",
	}
}

func versioned(requestID, resource string, version uint64) webhookd.Delivery {
	d := delivery(requestID, "d-"+requestID, fmt.Sprintf(`{"id":%q,"v":%d}`, requestID, version))
	d.Resource = resource
	d.Version = strconv.FormatUint(version, 10)
	d.VersionOrder = version
	return d
}

func mustDecide(t *testing.T, s *Store, d webhookd.Delivery) webhookd.Outcome {
	t.Helper()
	out, err := s.Decide(ctx, d)
	if err != nil {
		t.Fatalf("Decide(%s): %v", d.RequestID, err)
	}
	return out
}

func TestDecideTable(t *testing.T) {
	tests := []struct {
		dup      dedupe.Outcome
		ordering versioning.Ordering
		want     webhookd.Decision
	}{
		{dedupe.New, Unordered, webhookd.Accepted},
		{dedupe.New, versioning.First, webhookd.Accepted},
		{dedupe.New, versioning.Newer, webhookd.Accepted},
		{dedupe.New, versioning.Stale, webhookd.Stale},
		{dedupe.Duplicate, "", webhookd.Duplicate},
		{dedupe.Conflict, "", webhookd.Conflict},
	}
	for _, tt := range tests {
		if got := decide(tt.dup, tt.ordering); got != tt.want {
			t.Errorf("decide(%s, %s) = %s, want %s", tt.dup, tt.ordering, got, tt.want)
		}
	}
}

func TestReasonTable(t *testing.T) {
	tests := []struct {
		ordering        versioning.Ordering
		version, latest string
		want            string
	}{
		{Unordered, "", "", "request ID not seen before; the source has no resource version to order by"},
		{versioning.First, "3", "", "request ID not seen before; first version 3 of the resource"},
		{versioning.Newer, "4", "3", "request ID not seen before; version 4 is newer than the latest accepted version 3"},
		{versioning.Stale, "2", "3", "request ID not seen before; version 2 is not newer than the latest accepted version 3, so it was recorded and not applied"},
	}
	for _, tt := range tests {
		if got := reason(tt.ordering, tt.version, tt.latest); got != tt.want {
			t.Errorf("reason(%s, %q, %q) = %q, want %q", tt.ordering, tt.version, tt.latest, got, tt.want)
		}
	}
}

func TestRetriesWithNewDeliveryIDsAreDuplicates(t *testing.T) {
	s := openStore(t, t.TempDir())
	want := []webhookd.Decision{webhookd.Accepted, webhookd.Duplicate, webhookd.Duplicate}
	for i, w := range want {
		out := mustDecide(t, s, delivery("req-4401", fmt.Sprint("dlv-", i), `{"request_id":"req-4401"}`))
		if out.Decision != w {
			t.Errorf("delivery %d: %s, want %s", i, out.Decision, w)
		}
	}
	r, err := s.Receipt(ctx, "billing", "req-4401")
	if err != nil {
		t.Fatal(err)
	}
	if r.Decision != webhookd.Accepted || r.Attempts != 3 || len(r.Deliveries) != 3 {
		t.Errorf("receipt = %s, %d attempts, %d deliveries; want accepted, 3, 3", r.Decision, r.Attempts, len(r.Deliveries))
	}
	for i, d := range r.Deliveries {
		if d.DeliveryID != fmt.Sprint("dlv-", i) || d.Decision != want[i] {
			t.Errorf("deliveries[%d] = %+v", i, d)
		}
	}
	if r.Forward.State != webhookd.ForwardPending {
		t.Errorf("forward state = %s, want pending", r.Forward.State)
	}
	if n := countOutbox(t, s); n != 1 {
		t.Errorf("outbox holds %d entries, want 1", n)
	}
}

func TestStaleVersionsAreRecordedNotApplied(t *testing.T) {
	s := openStore(t, t.TempDir())
	steps := []struct {
		d      webhookd.Delivery
		want   webhookd.Decision
		latest string
	}{
		{versioned("req-10", "sub_1", 10), webhookd.Accepted, "10"},
		{versioned("req-9", "sub_1", 9), webhookd.Stale, "10"},
		{versioned("req-10b", "sub_1", 10), webhookd.Stale, "10"},
		{versioned("req-9", "sub_1", 9), webhookd.Duplicate, "10"}, // a redelivery of a stale request
		{versioned("req-11", "sub_1", 11), webhookd.Accepted, "11"},
	}
	for _, st := range steps {
		out := mustDecide(t, s, st.d)
		if out.Decision != st.want || out.LatestVersion != st.latest {
			t.Errorf("%s v%s: %s latest %s; want %s latest %s", st.d.RequestID, st.d.Version, out.Decision, out.LatestVersion, st.want, st.latest)
		}
	}
	r, err := s.Receipt(ctx, "billing", "req-9")
	if err != nil {
		t.Fatal(err)
	}
	if r.Decision != webhookd.Stale || r.OrderingDecision != "stale" || r.LatestVersionAtDecision != "10" || r.Forward.State != webhookd.ForwardNone {
		t.Errorf("stale receipt = %+v", r)
	}
	l, err := s.Latest(ctx, "billing", "sub_1")
	if err != nil {
		t.Fatal(err)
	}
	if l.Version != "11" || l.RequestID != "req-11" {
		t.Errorf("latest = %+v, want 11 by req-11", l)
	}
	if n := countOutbox(t, s); n != 2 {
		t.Errorf("outbox holds %d entries, want 2 (versions 10 and 11)", n)
	}
}

func TestReusedRequestIDWithAnotherBodyIsAConflict(t *testing.T) {
	s := openStore(t, t.TempDir())
	mustDecide(t, s, delivery("req-1", "a", `{"amount":10}`))
	if out := mustDecide(t, s, delivery("req-1", "b", `{"amount":99}`)); out.Decision != webhookd.Conflict {
		t.Fatalf("decision = %s, want conflict", out.Decision)
	}
	r, _ := s.Receipt(ctx, "billing", "req-1")
	if r.Decision != webhookd.Accepted || r.Deliveries[1].Decision != webhookd.Conflict {
		t.Errorf("receipt = %+v", r)
	}
	if n := countOutbox(t, s); n != 1 {
		t.Errorf("outbox holds %d entries, want 1", n)
	}
}

func TestConcurrentDeliveriesOfOneRequestIDAcceptOnce(t *testing.T) {
	s := openStore(t, t.TempDir())
	const n = 200
	counts := make(map[webhookd.Decision]int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := s.Decide(ctx, delivery("req-same", fmt.Sprint("d", i), `{"x":1}`))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			counts[out.Decision]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if counts[webhookd.Accepted] != 1 || counts[webhookd.Duplicate] != n-1 {
		t.Errorf("decisions = %v, want 1 accepted and %d duplicates", counts, n-1)
	}
	if r, _ := s.Receipt(ctx, "billing", "req-same"); r.Attempts != n {
		t.Errorf("attempts = %d, want %d", r.Attempts, n)
	}
}

func TestConcurrentVersionsNeverMoveLatestBackwards(t *testing.T) {
	s := openStore(t, t.TempDir())
	const n = 100
	var wg sync.WaitGroup
	var mu sync.Mutex
	var accepted []uint64
	for v := uint64(1); v <= n; v++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := s.Decide(ctx, versioned(fmt.Sprint("req-", v), "sub_1", v))
			if err != nil {
				t.Error(err)
				return
			}
			if out.Decision == webhookd.Accepted {
				mu.Lock()
				accepted = append(accepted, v)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	l, err := s.Latest(ctx, "billing", "sub_1")
	if err != nil {
		t.Fatal(err)
	}
	if l.Version != strconv.Itoa(n) {
		t.Errorf("latest = %s, want %d", l.Version, n)
	}
	// The outbox order is the acceptance order: it must be increasing.
	entries := outbox(t, s)
	if len(entries) != len(accepted) {
		t.Fatalf("outbox holds %d entries, %d accepted", len(entries), len(accepted))
	}
	for i := 1; i < len(entries); i++ {
		a, _ := strconv.Atoi(entries[i-1].Version)
		b, _ := strconv.Atoi(entries[i].Version)
		if b <= a {
			t.Fatalf("outbox has version %d after %d", b, a)
		}
	}
}

func TestBatchSeesItsOwnEarlierDecisions(t *testing.T) {
	s := openStore(t, t.TempDir())
	ds := []webhookd.Delivery{
		versioned("req-a", "sub_1", 5),
		versioned("req-a", "sub_1", 5), // same request, same batch
		versioned("req-b", "sub_1", 4), // older version, same batch
		versioned("req-c", "sub_1", 6),
	}
	want := []webhookd.Decision{webhookd.Accepted, webhookd.Duplicate, webhookd.Stale, webhookd.Accepted}
	got := applyAsOneBatch(t, s, ds)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("op %d: %s, want %s", i, got[i], want[i])
		}
	}
}

func TestOversizedBatchIsSplit(t *testing.T) {
	// Badger then takes about 150 KB per transaction.
	s := openStore(t, t.TempDir(), func(s *Store) { s.memTableSize = 1 << 20 })
	body := string(make([]byte, 8<<10))
	var ds []webhookd.Delivery
	for i := 0; i < 60; i++ { // about 480 KB of outbox bodies
		ds = append(ds, delivery(fmt.Sprint("req-", i), "d", fmt.Sprintf(`{"n":%d,"pad":%q}`, i, body)))
	}
	ds = append(ds, delivery("req-0", "d", fmt.Sprintf(`{"n":%d,"pad":%q}`, 0, body)))
	got := applyAsOneBatch(t, s, ds)
	for i, d := range got[:60] {
		if d != webhookd.Accepted {
			t.Fatalf("op %d: %s, want accepted", i, d)
		}
	}
	if got[60] != webhookd.Duplicate {
		t.Errorf("redelivery after the split: %s, want duplicate", got[60])
	}
	if n := countOutbox(t, s); n != 60 {
		t.Errorf("outbox holds %d entries, want 60", n)
	}
}

// applyAsOneBatch hands ds to the writer's apply in one call, as if they had
// all been waiting together.
func applyAsOneBatch(t *testing.T, s *Store, ds []webhookd.Delivery) []webhookd.Decision {
	t.Helper()
	got := make([]webhookd.Decision, len(ds))
	ops := make([]*op, len(ds))
	for i, d := range ds {
		ops[i] = &op{done: make(chan error, 1), stage: func(tx *tx) error {
			out, err := s.stageDecision(tx, d)
			got[i] = out.Decision
			return err
		}}
	}
	s.apply(ops)
	for i, o := range ops {
		if err := <-o.done; err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	return got
}

func TestReceiptsAndVersionsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	mustDecide(t, s, versioned("req-10", "sub_1", 10))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	if out := mustDecide(t, s, versioned("req-10", "sub_1", 10)); out.Decision != webhookd.Duplicate {
		t.Errorf("after reopen: %s, want duplicate", out.Decision)
	}
	if out := mustDecide(t, s, versioned("req-9", "sub_1", 9)); out.Decision != webhookd.Stale {
		t.Errorf("after reopen: %s, want stale", out.Decision)
	}
	mustDecide(t, s, versioned("req-11", "sub_1", 11))
	entries := outbox(t, s)
	if len(entries) != 2 || entries[0].RequestID != "req-10" || entries[1].RequestID != "req-11" {
		t.Errorf("outbox after reopen = %+v, want req-10 then req-11", entries)
	}
}

// TestRecordsOfAnOlderBuildAreRead opens records as builds before the
// binary form wrote them, JSON, and rewrites a receipt in the binary form
// when a redelivery changes it.
func TestRecordsOfAnOlderBuildAreRead(t *testing.T) {
	s := openStore(t, t.TempDir())
	d := versioned("req-10", "sub_1", 10)
	first := d.ReceivedAt.Add(-time.Minute).Round(0)
	old := dedupe.Receipt{
		Source: d.Source, RequestID: d.RequestID, Resource: d.Resource, Version: d.Version,
		Decision: webhookd.Accepted, Reason: reason(versioning.First, d.Version, ""), DuplicateDecision: dedupe.New,
		OrderingDecision: string(versioning.First), PayloadSHA256: d.Fingerprint, FirstSeen: first,
		Forward: webhookd.ForwardStatus{State: webhookd.ForwardPending},
	}
	old.Record(dedupe.Delivery{DeliveryID: "d-old", ReceivedAt: first, Decision: webhookd.Accepted})
	at := first.Add(time.Second)
	records := map[string]any{
		string(receiptKey(d.Source, d.RequestID)):       old,
		string(latestKey(d.Source, d.Resource)):         versioning.Latest{Version: "10", Order: 10, RequestID: d.RequestID, UpdatedAt: first},
		string(legacyForwardKey(d.Source, d.RequestID)): forwardRecord{ForwardStatus: webhookd.ForwardStatus{State: webhookd.ForwardDelivered, Attempts: 1, LastStatus: 200, DeliveredAt: &at}, ReceiptFirstSeen: first},
	}
	err := s.db.Update(func(txn *badger.Txn) error {
		for k, v := range records {
			b, err := json.Marshal(v)
			if err != nil {
				return err
			}
			if err := txn.Set([]byte(k), b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if out := mustDecide(t, s, d); out.Decision != webhookd.Duplicate || out.LatestVersion != "10" {
		t.Errorf("redelivery: %+v, want duplicate with latest version 10", out)
	}
	if out := mustDecide(t, s, versioned("req-9", "sub_1", 9)); out.Decision != webhookd.Stale {
		t.Errorf("version 9 after an older build's version 10: %s, want stale", out.Decision)
	}
	r := receiptOf(t, s, d.RequestID)
	if r.Reason != old.Reason || !r.FirstSeen.Equal(first) || r.Attempts != 2 || r.Forward.State != webhookd.ForwardDelivered || !r.Forward.DeliveredAt.Equal(at) {
		t.Errorf("receipt after the redelivery = %+v, want the older build's with its forward status and two attempts", r)
	}
	err = s.db.View(func(txn *badger.Txn) error {
		if _, err := txn.Get(legacyForwardKey(d.Source, d.RequestID)); !errors.Is(err, badger.ErrKeyNotFound) {
			t.Errorf("the older build's forward key after the redelivery that folded it: %v, want not found", err)
		}
		item, err := txn.Get(receiptKey(d.Source, d.RequestID))
		if err != nil {
			return err
		}
		return item.Value(func(b []byte) error {
			if b[0] != tagReceipt {
				t.Errorf("the rewritten receipt starts with %q, want the binary form's tag", b[0])
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestReceiptsExpireAfterTTL(t *testing.T) {
	s := openStore(t, t.TempDir(), func(s *Store) { s.ReceiptTTL = time.Second })
	mustDecide(t, s, versioned("req-1", "sub_1", 1))
	// Badger expires by the second; waiting past two boundaries is certain.
	time.Sleep(2100 * time.Millisecond)
	if _, err := s.Receipt(ctx, "billing", "req-1"); webhookd.ErrorCode(err) != webhookd.ENOTFOUND {
		t.Fatalf("receipt past TTL: err = %v, want not found", err)
	}
	if l, err := s.Latest(ctx, "billing", "sub_1"); err != nil || l.Version != "1" {
		t.Errorf("latest version must not expire: %+v, %v", l, err)
	}
	// A forgotten request ID is new work again; its old version is now stale.
	if out := mustDecide(t, s, versioned("req-1", "sub_1", 1)); out.Decision != webhookd.Stale {
		t.Errorf("redelivery past TTL: %s, want stale", out.Decision)
	}
}

func TestClosedStoreIsUnavailable(t *testing.T) {
	s := openStore(t, t.TempDir())
	s.Close()
	_, err := s.Decide(ctx, delivery("req-1", "d", "{}"))
	if webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Errorf("Decide after Close: %v, want unavailable", err)
	}
	if s.Ready() == nil {
		t.Error("Ready after Close = nil")
	}
	if _, err := s.Receipt(ctx, "billing", "req-1"); webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Errorf("Receipt after Close: %v, want unavailable", err)
	}
}

func TestOpenFailsOnALockedDirectory(t *testing.T) {
	dir := t.TempDir()
	openStore(t, dir)
	s := New(dir)
	err := s.Open()
	if webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Fatalf("second Open: %v, want unavailable", err)
	}
}

func outbox(t *testing.T, s *Store) []forward.Entry {
	t.Helper()
	entries, err := s.Outbox(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func countOutbox(t *testing.T, s *Store) int { return len(outbox(t, s)) }

func TestForwardStatusFollowsTheReceipt(t *testing.T) {
	s := openStore(t, t.TempDir())
	mustDecide(t, s, versioned("req-1", "sub_1", 1))
	if r := receiptOf(t, s, "req-1"); r.Forward.State != webhookd.ForwardPending {
		t.Fatalf("forward state after the decision: %s, want pending", r.Forward.State)
	}
	entries, err := s.Pending(ctx, 0, 10, 1<<20)
	if err != nil || len(entries) != 1 {
		t.Fatalf("pending: %d entries, %v", len(entries), err)
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	if err := s.Settle(ctx, entries[0], forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: at}); err != nil {
		t.Fatal(err)
	}
	want := webhookd.ForwardStatus{State: webhookd.ForwardDelivered, Attempts: 1, LastStatus: 200, DeliveredAt: &at}
	assertForward := func(when string) {
		t.Helper()
		got := receiptOf(t, s, "req-1").Forward
		if got.State != want.State || got.Attempts != want.Attempts || got.LastStatus != want.LastStatus ||
			got.DeliveredAt == nil || !got.DeliveredAt.Equal(at) {
			t.Errorf("forward status %s: %+v, want %+v", when, got, want)
		}
	}
	assertForward("after settling")
	// What the forwarder asks before it settles an entry again after a
	// Settle that failed, since Settle does not look.
	if held, err := s.Holds(ctx, entries[0]); err != nil || held {
		t.Errorf("Holds after settling = %v, %v; want false", held, err)
	}

	// A redelivery folds the status into the receipt it rewrites, so the
	// status lives as long as the receipt.
	d := versioned("req-1", "sub_1", 1)
	d.DeliveryID = "d-again"
	if out := mustDecide(t, s, d); out.Decision != webhookd.Duplicate {
		t.Fatalf("redelivery: %s", out.Decision)
	}
	assertForward("after a redelivery")
	firstSeen := receiptOf(t, s, "req-1").FirstSeen
	if err := s.view(func(txn *badger.Txn) error {
		found, err := (&tx{txn: txn}).exists(forwardKey("billing", "req-1", firstSeen))
		if found {
			t.Error("the forward key outlived the redelivery that folded it")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// A forward status is written to expire a receipt TTL after it was
// written, without reading the receipt: it lasts as long as a receipt that
// a redelivery kept alive, and neither it nor a dead letter that outlives
// the receipt touches a later receipt under the same request ID.
func TestForwardStatusLivesAsLongAsItsReceiptOnly(t *testing.T) {
	s := openStore(t, t.TempDir(), func(s *Store) { s.ReceiptTTL = time.Second })
	// Badger's expiries are whole seconds: steps are timed from one.
	second := time.Now().Truncate(time.Second).Add(time.Second)
	at := func(sec float64) { time.Sleep(time.Until(second.Add(time.Duration(sec * float64(time.Second))))) }
	settle := func(requestID string, state webhookd.ForwardState) {
		t.Helper()
		for _, e := range outbox(t, s) {
			if e.RequestID == requestID {
				if err := s.Settle(ctx, e, forward.Result{State: state, Attempts: 1, Status: 200, At: time.Now()}); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
		t.Fatalf("%s is not in the outbox", requestID)
	}

	at(0.05)
	mustDecide(t, s, delivery("req-1", "d-1", `{"n":1}`)) // expires at 2
	at(1.05)
	mustDecide(t, s, delivery("req-1", "d-2", `{"n":1}`)) // now expires at 3
	settle("req-1", webhookd.ForwardDelivered)
	at(2.1)
	if got := receiptOf(t, s, "req-1").Forward.State; got != webhookd.ForwardDelivered {
		t.Errorf("forward state past the first delivery's TTL: %s, want delivered", got)
	}

	mustDecide(t, s, delivery("req-2", "d-1", `{"n":2}`)) // expires at 4
	mustDecide(t, s, delivery("req-3", "d-1", `{"n":3}`))
	settle("req-3", webhookd.ForwardDead)
	at(3.1)
	settle("req-2", webhookd.ForwardDelivered) // its status expires at 5
	at(4.1)
	for _, id := range []string{"req-2", "req-3"} {
		if _, err := s.Receipt(ctx, "billing", id); webhookd.ErrorCode(err) != webhookd.ENOTFOUND {
			t.Fatalf("receipt of %s past its TTL: %v, want not found", id, err)
		}
		mustDecide(t, s, delivery(id, "d-2", `{"n":0}`))
	}
	// The dead letter of req-3's first receipt would be sent in place of
	// the second, with its body and status, under the same Idempotency-Key.
	if err := s.RetryDeadLetter(ctx, "billing", "req-3"); webhookd.ErrorCode(err) != webhookd.ECONFLICT {
		t.Fatalf("retrying the dead letter of an earlier receipt under req-3: %v, want conflict", err)
	}
	if err := s.DiscardDeadLetter(ctx, "billing", "req-3"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"req-2", "req-3"} {
		if got := receiptOf(t, s, id).Forward.State; got != webhookd.ForwardPending {
			t.Errorf("forward state of a new receipt under %s, an old request ID: %s, want pending", id, got)
		}
	}
}

// An outbox entry can outlive its receipt (it waits in its lane), and the
// request ID can come back under a new receipt meanwhile. Settling the old
// entry after the new one must not overwrite the new receipt's status.
func TestSettlingAnOldEntryKeepsALaterReceiptsStatus(t *testing.T) {
	s := openStore(t, t.TempDir(), func(s *Store) { s.ReceiptTTL = time.Second })
	second := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(second.Add(50 * time.Millisecond)))
	mustDecide(t, s, delivery("req-1", "d-1", `{"n":1}`)) // expires at 2
	time.Sleep(time.Until(second.Add(2100 * time.Millisecond)))
	mustDecide(t, s, delivery("req-1", "d-2", `{"n":2}`))
	entries := outbox(t, s)
	if len(entries) != 2 {
		t.Fatalf("outbox: %d entries, want the old and the new one", len(entries))
	}
	settle := func(e forward.Entry, state webhookd.ForwardState) {
		t.Helper()
		if err := s.Settle(ctx, e, forward.Result{State: state, Attempts: 1, Status: 500, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	settle(entries[1], webhookd.ForwardDelivered)
	settle(entries[0], webhookd.ForwardDead)
	if got := receiptOf(t, s, "req-1").Forward.State; got != webhookd.ForwardDelivered {
		t.Errorf("forward state of the new receipt after the old entry was settled: %s, want delivered", got)
	}
}

// A commit whose sync fails may still be in Badger's memtable. The store
// must not answer from it (a redelivery would get "duplicate" from a
// receipt a crash can lose), so it takes nothing more until reopened.
func TestFailedCommitStopsTheStore(t *testing.T) {
	var fails atomic.Bool
	fails.Store(true)
	s := openStore(t, t.TempDir(), func(s *Store) {
		s.commitTxn = func(txn *badger.Txn) error {
			if err := txn.Commit(); err != nil || !fails.Load() {
				return err
			}
			return errors.New("sync /data/webhookd/00001.mem: input/output error")
		}
	})
	_, err := s.Decide(ctx, delivery("req-1", "d-1", `{}`))
	if webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Fatalf("Decide with a failing sync: %v, want unavailable", err)
	}
	// The cause names files: it is for the log, not for the caller.
	if msg := webhookd.ErrorMessage(err); strings.Contains(msg, "00001.mem") || !strings.Contains(err.Error(), "00001.mem") {
		t.Errorf("caller's message %q, logged error %q: want the cause in the log only", msg, err)
	}
	select {
	case <-s.Failed():
	default:
		t.Error("Failed is not closed after a failed commit")
	}
	fails.Store(false)
	if out, err := s.Decide(ctx, delivery("req-1", "d-2", `{}`)); webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Errorf("redelivery after the failed commit: %+v, %v; want unavailable, not an answer from memory", out, err)
	}
	if _, err := s.Receipt(ctx, "billing", "req-1"); webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Errorf("reading the receipt: %v, want unavailable", err)
	}
	if err := s.Ready(); webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Errorf("Ready = %v, want unavailable", err)
	}
}

// A read while the writer is still busy with a failed commit (here, its
// log line blocks, as on a full disk) must not see that commit's writes.
func TestNoReadFromMemoryAfterAFailedCommit(t *testing.T) {
	logged, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s := openStore(t, t.TempDir(), func(s *Store) {
		s.commitTxn = func(txn *badger.Txn) error {
			if err := txn.Commit(); err != nil {
				return err
			}
			return errors.New("sync 00001.mem: input/output error")
		}
		s.Logger = zaptest.NewLogger(t, zaptest.WrapOptions(zap.Hooks(func(e zapcore.Entry) error {
			if strings.HasPrefix(e.Message, "commit batch") {
				once.Do(func() { close(logged); <-release })
			}
			return nil
		})))
	})
	done := make(chan error, 1)
	go func() {
		_, err := s.Decide(ctx, delivery("req-1", "d-1", `{}`))
		done <- err
	}()
	<-logged
	r, err := s.Receipt(ctx, "billing", "req-1")
	close(release)
	if err := <-done; webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Fatalf("Decide: %v, want unavailable", err)
	}
	if webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Errorf("receipt read while the failed commit was logged: %+v, %v; want unavailable", r, err)
	}
}

// An outbox entry that outlived its receipt, after the request ID came back
// under a new receipt, does not take the new receipt's payload: the key
// holds one payload per request ID, and it is no longer the entry's.
func TestEntryDoesNotTakeALaterReceiptsPayload(t *testing.T) {
	s := openStore(t, t.TempDir(), func(s *Store) { s.ReceiptTTL = time.Second })
	mustDecide(t, s, delivery("req-1", "d-1", `{"n":"A"}`))
	time.Sleep(2100 * time.Millisecond) // the receipt and its payload expire; the entry waits
	if out := mustDecide(t, s, delivery("req-1", "d-2", `{"n":"B"}`)); out.Decision != webhookd.Accepted {
		t.Fatalf("the request ID again, past its receipt: %s, want accepted", out.Decision)
	}
	entries := outbox(t, s)
	if len(entries) != 2 {
		t.Fatalf("outbox: %d entries, want both", len(entries))
	}
	if body, err := s.Body(ctx, entries[0]); !errors.Is(err, forward.ErrPayloadGone) {
		t.Errorf("the first receipt's entry: body %q, %v; want its payload gone", body, err)
	}
	if body, err := s.Body(ctx, entries[1]); err != nil || string(body) != `{"n":"B"}` {
		t.Errorf("the later receipt's entry: body %q, %v", body, err)
	}
	// Held in memory since its commit, the first entry has its own body;
	// read from Badger after a restart, none.
	if pending, err := s.Pending(ctx, 0, 10, 1<<20); err != nil || len(pending) != 2 || string(pending[0].Body) != `{"n":"A"}` {
		t.Errorf("pending from memory: %+v, %v; want the first with its own body", pending, err)
	}
	dir := s.Path
	s.Close()
	s = openStore(t, dir, func(s *Store) { s.ReceiptTTL = time.Second })
	if pending, err := s.Pending(ctx, 0, 10, 1<<20); err != nil || len(pending) != 2 || pending[0].Body != nil || string(pending[1].Body) != `{"n":"B"}` {
		t.Errorf("pending from Badger: %+v, %v; want the first without a body", pending, err)
	}
}

func receiptOf(t *testing.T, s *Store, requestID string) *dedupe.Receipt {
	t.Helper()
	r, err := s.Receipt(ctx, "billing", requestID)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestTailHandsOverCommittedEntriesOnce(t *testing.T) {
	seqs := func(es []forward.Entry) []uint64 {
		var out []uint64
		for _, e := range es {
			out = append(out, e.Seq)
		}
		return out
	}
	tl := &tail{from: 5}
	tl.add([]forward.Entry{{Seq: 5}, {Seq: 6}, {Seq: 8}}) // 7 failed: a gap
	steps := []struct {
		after, limit int
		want         []uint64
		ok           bool
	}{
		{after: 3, limit: 10, ok: false},                     // 4 may be on disk only
		{after: 4, limit: 2, want: []uint64{5, 6}, ok: true}, // limit holds
		{after: 6, limit: 10, want: []uint64{8}, ok: true},   // 5 and 6 were handed over
		{after: 8, limit: 10, want: nil, ok: true},
	}
	for _, st := range steps {
		got, ok := tl.after(uint64(st.after), st.limit)
		if ok != st.ok || !slices.Equal(seqs(got), st.want) {
			t.Errorf("after(%d, %d) = %v, %v; want %v, %v", st.after, st.limit, seqs(got), ok, st.want, st.ok)
		}
	}
	// A consumer that falls behind by more than maxTail is sent to Badger.
	var many []forward.Entry
	for i := range maxTail + 1 {
		many = append(many, forward.Entry{Seq: uint64(9 + i)})
	}
	tl.add(many)
	if _, ok := tl.after(8, 10); ok {
		t.Error("after overflowing, the tail still claims entries it dropped")
	}
	next := uint64(9 + maxTail + 1)
	tl.add([]forward.Entry{{Seq: next}})
	if got, ok := tl.after(next-1, 10); !ok || !slices.Equal(seqs(got), []uint64{next}) {
		t.Errorf("entries after the overflow: %v, %v", seqs(got), ok)
	}
	// After a failed commit, whose positions end before next+3, Badger
	// is read for them.
	tl.forget(next + 3)
	if got, ok := tl.after(next, 10); ok {
		t.Errorf("after a failed commit, the tail still answers for it: %v", seqs(got))
	}
	if got, ok := tl.after(next+2, 10); !ok || got != nil {
		t.Errorf("after the failed commit's positions: %v, %v; want nothing held, from the tail", seqs(got), ok)
	}
}

func TestPendingHandsOverBodiesAndFallsBackToBadger(t *testing.T) {
	s := openStore(t, t.TempDir())
	mustDecide(t, s, versioned("req-1", "sub_1", 1))
	d := versioned("req-2", "sub_1", 2)
	mustDecide(t, s, d)
	copy(d.Body, "XXXXXXXX") // the gateway's request buffer is reused once Decide returns
	fromTail, err := s.Pending(ctx, 0, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	forgetTail(s) // the two entries are read from Badger next
	fromDisk, err := s.Pending(ctx, 0, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]forward.Entry{"tail": fromTail, "badger": fromDisk} {
		if len(got) != 2 || got[0].RequestID != "req-1" || got[1].RequestID != "req-2" || got[0].Seq >= got[1].Seq {
			t.Fatalf("%s: %+v", name, got)
		}
		if want := `{"id":"req-2","v":2}`; string(got[1].Body) != want {
			t.Errorf("%s: body %q, want %q", name, got[1].Body, want)
		}
	}
}

// forgetTail overflows the store's tail, so that Pending reads the entries
// committed so far from Badger, as for a forwarder that fell behind.
func forgetTail(s *Store) {
	overflow := make([]forward.Entry, maxTail+1)
	for i := range overflow {
		overflow[i].Seq = uint64(100 + i)
	}
	s.tail.add(overflow)
}

// Outbox entries written before bodies moved to the payload key carry their
// body themselves; it must still be the one sent, whether the scan reads it
// or Body does.
func TestOutboxEntryWithItsOwnBodyIsSentAsIs(t *testing.T) {
	s := openStore(t, t.TempDir())
	old := forward.Entry{Source: "billing", RequestID: "req-1", Body: []byte(`{"old":"format"}`)}
	if err := s.update(func(t *tx) error { return t.setEntry(outboxKey(1), &old) }); err != nil {
		t.Fatal(err)
	}
	forgetTail(s)
	for _, room := range []int{1 << 20, 0} {
		entries, err := s.Pending(ctx, 0, 10, room)
		if err != nil || len(entries) != 1 {
			t.Fatalf("pending: %+v, %v", entries, err)
		}
		body := entries[0].Body
		if room == 0 {
			if body != nil {
				t.Errorf("no room for bodies, yet the scan read %q", body)
			}
			if body, err = s.Body(ctx, entries[0]); err != nil {
				t.Fatal(err)
			}
		}
		if string(body) != `{"old":"format"}` {
			t.Errorf("room %d: body %q, want the entry's own", room, body)
		}
	}
}

// Rescheduling such an entry after a failed attempt rewrites it: its body,
// which has no payload key, must stay in it.
func TestRetriedEntryKeepsItsOwnBody(t *testing.T) {
	s := openStore(t, t.TempDir())
	old := forward.Entry{Source: "billing", RequestID: "req-1", Body: []byte(`{"old":"format"}`)}
	if err := s.update(func(t *tx) error { return t.setEntry(outboxKey(1), &old) }); err != nil {
		t.Fatal(err)
	}
	old.Seq = 1
	retry := forward.Result{State: webhookd.ForwardRetrying, Attempts: 1, Status: 503, NextAttemptAt: time.Now().Add(time.Minute)}
	if err := s.Settle(ctx, old, retry); err != nil {
		t.Fatal(err)
	}
	forgetTail(s)
	entries, err := s.Pending(ctx, 0, 10, 0)
	if err != nil || len(entries) != 1 || entries[0].Attempts != 1 {
		t.Fatalf("pending after the retry: %+v, %v", entries, err)
	}
	if body, err := s.Body(ctx, entries[0]); err != nil || string(body) != `{"old":"format"}` {
		t.Errorf("Body after the retry = %q, %v; want the entry's own", body, err)
	}
}

// A forwarder holds bodies up to a budget: the scan stops reading them
// there, and Body reads one later from its payload key.
func TestPendingReadsBodiesUpToTheBudget(t *testing.T) {
	s := openStore(t, t.TempDir())
	for v := uint64(1); v <= 3; v++ {
		mustDecide(t, s, versioned(fmt.Sprintf("req-%d", v), "sub_1", v))
	}
	forgetTail(s)
	size := len(`{"id":"req-1","v":1}`)
	entries, err := s.Pending(ctx, 0, 10, 2*size)
	if err != nil || len(entries) != 3 {
		t.Fatalf("pending: %+v, %v", entries, err)
	}
	for i, e := range entries {
		if hasBody := e.Body != nil; hasBody != (i < 2) {
			t.Errorf("entry %d (%s): body %q", i, e.RequestID, e.Body)
		}
	}
	body, err := s.Body(ctx, entries[2])
	if want := `{"id":"req-3","v":3}`; err != nil || string(body) != want {
		t.Errorf("Body = %q, %v; want %q", body, err, want)
	}
	if _, err := s.Body(ctx, forward.Entry{Seq: 99, Source: "billing", RequestID: "never"}); webhookd.ErrorCode(err) != webhookd.ENOTFOUND {
		t.Errorf("Body of an entry that is not there: %v, want ENOTFOUND", err)
	}
}
