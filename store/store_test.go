package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/webhookd/webhookd/store/storetest"
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

// clocked opens a store with a receipt TTL of a second on a clock the
// test moves: decideAt decides a delivery received at the clock's time, and
// at(sec) sets the clock sec seconds past its start, a whole second.
func clocked(t *testing.T) (s *Store, decideAt func(webhookd.Delivery) webhookd.Outcome, at func(sec float64)) {
	clock := storetest.NewClock()
	start := clock.Now()
	s = openStore(t, t.TempDir(), func(s *Store) { s.ReceiptTTL, s.Now = time.Second, clock.Now })
	decideAt = func(d webhookd.Delivery) webhookd.Outcome {
		t.Helper()
		d.ReceivedAt = clock.Now()
		return mustDecide(t, s, d)
	}
	at = func(sec float64) {
		clock.Advance(start.Add(time.Duration(sec * float64(time.Second))).Sub(clock.Now()))
	}
	return s, decideAt, at
}

func mustDecide(t *testing.T, s *Store, d webhookd.Delivery) webhookd.Outcome {
	t.Helper()
	out, err := s.Decide(ctx, d)
	if err != nil {
		t.Fatalf("Decide(%s): %v", d.RequestID, err)
	}
	return out
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
			out, err := s.stageDecision(tx, &d)
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

// claimAll claims every due lane head of billing, for no time: each is
// claimable again at once, and its claim holds until then.
func claimAll(t *testing.T, s *Store) []forward.Claim {
	t.Helper()
	claims, err := s.Claim(ctx, "test", "billing", 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	return claims
}

// settle claims e, which must be a lane head, and settles it with r.
func settle(t *testing.T, s *Store, e forward.Entry, r forward.Result) {
	t.Helper()
	for _, c := range claimAll(t, s) {
		if c.Seq == e.Seq {
			if err := s.Settle(ctx, c, r); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("%s/%s is not a lane head", e.Source, e.RequestID)
}

func TestForwardStatusFollowsTheReceipt(t *testing.T) {
	s := openStore(t, t.TempDir())
	mustDecide(t, s, versioned("req-1", "sub_1", 1))
	if r := receiptOf(t, s, "req-1"); r.Forward.State != webhookd.ForwardPending {
		t.Fatalf("forward state after the decision: %s, want pending", r.Forward.State)
	}
	entries := outbox(t, s)
	if len(entries) != 1 {
		t.Fatalf("outbox: %d entries", len(entries))
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	settle(t, s, entries[0], forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: at})
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
		found, err := s.reader(txn).exists(forwardKey("billing", "req-1", firstSeen))
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
	s, decideAt, at := clocked(t)
	settle := func(requestID string, state webhookd.ForwardState) {
		t.Helper()
		for _, e := range outbox(t, s) {
			if e.RequestID == requestID {
				settle(t, s, e, forward.Result{State: state, Attempts: 1, Status: 200, At: time.Now()})
				return
			}
		}
		t.Fatalf("%s is not in the outbox", requestID)
	}

	at(0.05)
	decideAt(delivery("req-1", "d-1", `{"n":1}`)) // expires at 2
	at(1.05)
	decideAt(delivery("req-1", "d-2", `{"n":1}`)) // now expires at 3
	settle("req-1", webhookd.ForwardDelivered)
	at(2.1)
	if got := receiptOf(t, s, "req-1").Forward.State; got != webhookd.ForwardDelivered {
		t.Errorf("forward state past the first delivery's TTL: %s, want delivered", got)
	}

	decideAt(delivery("req-2", "d-1", `{"n":2}`)) // expires at 4
	decideAt(delivery("req-3", "d-1", `{"n":3}`))
	settle("req-3", webhookd.ForwardDead)
	at(3.1)
	settle("req-2", webhookd.ForwardDelivered) // its status expires at 5
	at(4.1)
	for _, id := range []string{"req-2", "req-3"} {
		if _, err := s.Receipt(ctx, "billing", id); webhookd.ErrorCode(err) != webhookd.ENOTFOUND {
			t.Fatalf("receipt of %s past its TTL: %v, want not found", id, err)
		}
		decideAt(delivery(id, "d-2", `{"n":0}`))
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
	s, decideAt, at := clocked(t)
	at(0.05)
	decideAt(delivery("req-1", "d-1", `{"n":1}`)) // expires at 2
	at(2.1)
	decideAt(delivery("req-1", "d-2", `{"n":2}`))
	entries := outbox(t, s)
	if len(entries) != 2 {
		t.Fatalf("outbox: %d entries, want the old and the new one", len(entries))
	}
	settle(t, s, entries[1], forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: time.Now()})
	settle(t, s, entries[0], forward.Result{State: webhookd.ForwardDead, Attempts: 1, Status: 500, At: time.Now()})
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

// A value of 1 MiB or more goes to Badger's value log, whose failed sync
// Badger logs and commits anyway: the store fails the batch as it fails
// any commit whose sync fails.
func TestFailedValueLogSyncStopsTheStore(t *testing.T) {
	var s *Store
	s = openStore(t, t.TempDir(), func(st *Store) {
		st.commitTxn = func(txn *badger.Txn) error {
			err := txn.Commit()
			// As Badger's value log reports it, during the commit.
			s.db.Opts().Logger.Errorf(vlogSyncFailed+": %v\n", errors.New("sync 000001.vlog: input/output error"))
			return err
		}
	})
	_, err := s.Decide(ctx, delivery("req-1", "d-1", `{}`))
	if webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE || !strings.Contains(err.Error(), "000001.vlog") {
		t.Fatalf("Decide with a failing value-log sync: %v, want unavailable, caused by the sync", err)
	}
	select {
	case <-s.Failed():
	default:
		t.Error("Failed is not closed after a failed value-log sync")
	}
}

// The store knows a failed value-log sync only by Badger's log line: this
// fails when a Badger upgrade changes it.
func TestBadgerReportsValueLogSyncAsTheStoreReadsIt(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/dgraph-io/badger/v4").Output()
	if err != nil {
		t.Fatalf("go list badger: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "value.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(src, []byte(`vlog.opt.Errorf("`+vlogSyncFailed+": ")) {
		t.Fatalf("badger's value.go no longer logs a failed sync as %q", vlogSyncFailed)
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
	s, decideAt, at := clocked(t)
	decideAt(delivery("req-1", "d-1", `{"n":"A"}`))
	at(2.1) // the receipt and its payload expire; the entry waits
	if out := decideAt(delivery("req-1", "d-2", `{"n":"B"}`)); out.Decision != webhookd.Accepted {
		t.Fatalf("the request ID again, past its receipt: %s, want accepted", out.Decision)
	}
	entries := outbox(t, s)
	if len(entries) != 2 {
		t.Fatalf("outbox: %d entries, want both", len(entries))
	}
	// Held in memory since its commit or read from Badger after a
	// restart, the first entry comes without a body: its payload expired,
	// and the key holds the later receipt's.
	if claims := claimAll(t, s); len(claims) != 2 || claims[0].Body != nil || string(claims[1].Body) != `{"n":"B"}` {
		t.Errorf("claims from memory: %+v; want the first without a body", claims)
	}
	dir, now := s.Path, s.Now
	s.Close()
	s = openStore(t, dir, func(s *Store) { s.ReceiptTTL, s.Now = time.Second, now })
	if claims := claimAll(t, s); len(claims) != 2 || claims[0].Body != nil || string(claims[1].Body) != `{"n":"B"}` {
		t.Errorf("claims from Badger: %+v; want the first without a body", claims)
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
