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
	"github.com/webhookd/webhookd/storage"
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
		Routes:      []string{"ledger"},
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
	if st := r.Route("ledger"); st == nil || st.State != webhookd.ForwardPending {
		t.Errorf("forward status = %+v, want pending", st)
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

// outbox lists every entry of the outbox, page by page.
func outbox(t *testing.T, s *Store) []forward.Entry {
	t.Helper()
	var all []forward.Entry
	page := storage.Page{Limit: storage.MaxLimit}
	for {
		entries, next, err := s.Outbox(ctx, forward.Target{}, page)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, entries...)
		if next == "" {
			return all
		}
		page.Cursor = next
	}
}

func countOutbox(t *testing.T, s *Store) int { return len(outbox(t, s)) }

// claimAll claims every due lane head of billing's ledger route, for no
// time: each is claimable again at once, and its claim holds until then.
func claimAll(t *testing.T, s *Store) []forward.Claim {
	t.Helper()
	return claimAllOf(t, s, ledger)
}

func claimAllOf(t *testing.T, s *Store, target forward.Target) []forward.Claim {
	t.Helper()
	claims, err := s.Claim(ctx, "test", target, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	return claims
}

// settle claims e, which must be a lane head, and settles it with r.
func settle(t *testing.T, s *Store, e forward.Entry, r forward.Result) {
	t.Helper()
	for _, c := range claimAllOf(t, s, e.Target()) {
		if c.Seq == e.Seq {
			if err := s.Settle(ctx, c, r); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("%s/%s is not a lane head", e.Target(), e.RequestID)
}

// statusOf returns the forward status of requestID's receipt on route.
func statusOf(t *testing.T, s *Store, requestID, route string) webhookd.ForwardStatus {
	t.Helper()
	rs := receiptOf(t, s, requestID).Route(route)
	if rs == nil {
		t.Fatalf("%s was not forwarded to %s", requestID, route)
	}
	return rs.ForwardStatus
}

func TestForwardStatusesFollowTheReceipt(t *testing.T) {
	s := openStore(t, t.TempDir())
	d := versioned("req-1", "sub_1", 1)
	d.Routes = []string{"ledger", "audit"}
	mustDecide(t, s, d)
	for _, route := range d.Routes {
		if st := statusOf(t, s, "req-1", route); st.State != webhookd.ForwardPending {
			t.Fatalf("forward state on %s after the decision: %s, want pending", route, st.State)
		}
	}
	entries := outbox(t, s)
	if len(entries) != 2 || entries[0].Route != "ledger" || entries[1].Route != "audit" {
		t.Fatalf("outbox: %+v, want an entry on ledger, then audit", entries)
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	settle(t, s, entries[0], forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: at})
	settle(t, s, entries[1], forward.Result{State: webhookd.ForwardDead, Attempts: 1, Status: 400, At: at})
	assertForward := func(when string) {
		t.Helper()
		got := statusOf(t, s, "req-1", "ledger")
		if got.State != webhookd.ForwardDelivered || got.Attempts != 1 || got.LastStatus != 200 ||
			got.DeliveredAt == nil || !got.DeliveredAt.Equal(at) {
			t.Errorf("forward status on ledger %s: %+v, want delivered at %v", when, got, at)
		}
		if got := statusOf(t, s, "req-1", "audit"); got.State != webhookd.ForwardDead || got.LastStatus != 400 {
			t.Errorf("forward status on audit %s: %+v, want dead after a 400", when, got)
		}
	}
	assertForward("after settling")

	// A redelivery folds every route's status into the receipt it
	// rewrites, so the statuses live as long as the receipt.
	d.DeliveryID = "d-again"
	if out := mustDecide(t, s, d); out.Decision != webhookd.Duplicate {
		t.Fatalf("redelivery: %s", out.Decision)
	}
	assertForward("after a redelivery")
	firstSeen := receiptOf(t, s, "req-1").FirstSeen
	if err := s.view(func(txn *badger.Txn) error {
		for _, route := range d.Routes {
			found, err := s.reader(txn).exists(forwardKey("billing", "req-1", firstSeen, route))
			if err != nil {
				return err
			}
			if found {
				t.Errorf("the forward key of %s outlived the redelivery that folded it", route)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A delivery to several routes writes its body once: one payload key,
// and an outbox entry without a body for each route. Each route's claim
// gets the body.
func TestFanOutWritesOnePayload(t *testing.T) {
	s := openStore(t, t.TempDir())
	d := delivery("req-1", "d-1", `{"fan":"out"}`)
	d.Routes = []string{"a", "b", "c"}
	mustDecide(t, s, d)
	count := func(prefix byte) (n int) {
		t.Helper()
		if err := s.view(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefix}})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				n++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if p, o := count(prefixPayload), count(prefixOutbox); p != 1 || o != 3 {
		t.Errorf("%d payload keys and %d outbox keys, want 1 and 3", p, o)
	}
	for _, e := range outbox(t, s) {
		if e.Body != nil {
			t.Errorf("outbox entry of %s holds a body", e.Route)
		}
	}
	// From memory, then from the payload key after a restart.
	for _, from := range []string{"memory", "badger"} {
		if from == "badger" {
			s = reopened(t, s)
		}
		for _, route := range d.Routes {
			c := claimAllOf(t, s, forward.Target{Source: "billing", Route: route})
			if len(c) != 1 || c[0].Route != route || string(c[0].Body) != `{"fan":"out"}` {
				t.Errorf("claimed on %s from %s: %+v, want req-1 with its body", route, from, c)
			}
		}
	}
}

// reopened closes s and opens its directory again, with its clock and TTL.
func reopened(t *testing.T, s *Store) *Store {
	t.Helper()
	dir, now, ttl := s.Path, s.Now, s.ReceiptTTL
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return openStore(t, dir, func(s *Store) { s.ReceiptTTL, s.Now = ttl, now })
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
	if got := statusOf(t, s, "req-1", "ledger").State; got != webhookd.ForwardDelivered {
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
	if err := s.RetryDeadLetter(ctx, ledger, "req-3"); webhookd.ErrorCode(err) != webhookd.ECONFLICT {
		t.Fatalf("retrying the dead letter of an earlier receipt under req-3: %v, want conflict", err)
	}
	if err := s.DiscardDeadLetter(ctx, ledger, "req-3"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"req-2", "req-3"} {
		if got := statusOf(t, s, id, "ledger").State; got != webhookd.ForwardPending {
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
	if got := statusOf(t, s, "req-1", "ledger").State; got != webhookd.ForwardDelivered {
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

// A receipt or a body goes to Badger's value log, whose failed sync
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
	s = reopened(t, s)
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
