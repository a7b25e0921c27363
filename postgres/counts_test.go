package postgres

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/postgres/pgtest"
)

// openFolding opens a store on dsn that folds its counts every fold.
func openFolding(t *testing.T, dsn string, fold time.Duration) *Store {
	t.Helper()
	s := New(dsn)
	s.Logger = zaptest.NewLogger(t)
	s.FoldInterval = fold
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// wantCounts checks Pending and DeadLetterCounts against a count of the
// outbox's and the dead letters' rows.
func wantCounts(t *testing.T, s *Store, step string) {
	t.Helper()
	for _, c := range []struct {
		table string
		got   func() (map[forward.Target]int, error)
	}{
		{"webhookd_outbox", func() (map[forward.Target]int, error) { return s.Pending(ctx) }},
		{"webhookd_dead_letters", s.DeadLetterCounts},
	} {
		rows, err := s.pool.Query(ctx, `SELECT source, route, count(*) FROM `+c.table+` GROUP BY source, route`)
		if err != nil {
			t.Fatal(err)
		}
		want := map[forward.Target]int{}
		var tg forward.Target
		var n int
		if _, err := pgx.ForEachRow(rows, []any{&tg.Source, &tg.Route, &n}, func() error { want[tg] = n; return nil }); err != nil {
			t.Fatal(err)
		}
		if got, err := c.got(); err != nil || !maps.Equal(got, want) {
			t.Errorf("%s: counts of %s %v, %v; the table holds %v", step, c.table, got, err, want)
		}
	}
}

func decideOn(t *testing.T, s *Store, id string, routes ...string) {
	t.Helper()
	d := delivery(id, "", 0, id)
	d.Routes = routes
	if out, err := s.Decide(ctx, d); err != nil || out.Decision != webhookd.Accepted {
		t.Fatalf("decide %s: %+v, %v", id, out, err)
	}
}

// TestFoldsAtOnce runs a fold while another one has deleted the same
// rows and not committed: the second waits for the first, skips the rows
// it deleted, folds only the rows the first did not see, and the counts
// stay exact.
func TestFoldsAtOnce(t *testing.T) {
	s := openFolding(t, pgtest.SchemaDSN(t, t.Name()), time.Hour)
	for i := range 3 {
		decideOn(t, s, fmt.Sprint("before-", i), target.Route)
	}
	first, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	var pid uint32
	if err := first.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Exec(ctx, foldCounts); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		decideOn(t, s, fmt.Sprint("after-", i), target.Route)
	}
	second := make(chan error, 1)
	go func() { second <- s.Fold(ctx) }()
	eventually(t, "waiting for the first fold", func() bool {
		var waits bool
		err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::integer = ANY (pg_blocking_pids(pid)))`,
			pid).Scan(&waits)
		return err == nil && waits
	})
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	var rows, sum int
	if err := s.pool.QueryRow(ctx, `SELECT count(*), sum(n) FROM webhookd_counts`).Scan(&rows, &sum); err != nil {
		t.Fatal(err)
	}
	if rows != 2 || sum != 5 {
		t.Errorf("%d count rows adding up to %d, want the two folds' 3 and 2", rows, sum)
	}
	wantCounts(t, s, "after two folds at once")
}

// TestCountsExactAcrossReplicas has three replicas deciding, claiming and
// settling at once, delivered and dead, while each folds every few
// milliseconds: the counts are the tables' throughout.
func TestCountsExactAcrossReplicas(t *testing.T) {
	dsn := pgtest.SchemaDSN(t, t.Name())
	stores := make([]*Store, 3)
	for i := range stores {
		stores[i] = openFolding(t, dsn, 5*time.Millisecond)
	}
	other := forward.Target{Source: target.Source, Route: "other"}
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			for j := range 60 {
				decideOn(t, s, fmt.Sprintf("r%d-%d", i, j), target.Route, other.Route)
			}
		})
		wg.Go(func() {
			for range 40 {
				for _, tg := range []forward.Target{target, other} {
					claims, err := s.Claim(ctx, fmt.Sprint("w", i), tg, 4, time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					for k, c := range claims {
						state := webhookd.ForwardDelivered
						if k%2 == 1 {
							state = webhookd.ForwardDead
						}
						r := forward.Result{State: state, Attempts: 1, Status: 200, At: time.Now()}
						if err := s.Settle(ctx, c, r); err != nil {
							t.Error(err)
						}
					}
				}
			}
		})
	}
	wg.Wait()
	for _, s := range stores {
		wantCounts(t, s, "after the replicas' writes")
	}
	if err := stores[0].Fold(ctx); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := stores[0].pool.QueryRow(ctx, `SELECT count(*) FROM webhookd_counts`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows > 4 {
		t.Errorf("%d count rows after a fold, want one a target and kind", rows)
	}
	wantCounts(t, stores[0], "after a fold")
}

// TestVacuumsWhereAutovacuumDoesNot turns autovacuum off for the outbox
// and the counts: a fold vacuums the counts, and the outbox is vacuumed
// by one replica at a time, on a connection of its own with no statement
// timeout, leaving the pool's connections theirs.
func TestVacuumsWhereAutovacuumDoesNot(t *testing.T) {
	dsn := pgtest.SchemaDSN(t, t.Name())
	s := openFolding(t, dsn, time.Hour)
	for _, table := range selfVacuumed {
		if _, err := s.pool.Exec(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = off)`); err != nil {
			t.Fatal(err)
		}
	}
	s = New(dsn)
	s.Logger, s.FoldInterval = zaptest.NewLogger(t), time.Hour
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	vacuums := func(table string) int {
		t.Helper()
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = to_regclass($1)`,
			table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	counts := vacuums("webhookd_counts")
	if err := s.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	if got := vacuums("webhookd_counts"); got != counts+1 {
		t.Errorf("counts vacuumed %d times after a fold, want %d", got, counts+1)
	}

	// Another replica's VACUUM holds this lock on the outbox while it runs.
	other, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE webhookd_outbox IN SHARE UPDATE EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	outbox := vacuums("webhookd_outbox")
	if did, err := s.vacuumOutboxAlone(ctx); err != nil || did {
		t.Errorf("vacuumed while another vacuum ran: %v, %v", did, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if did, err := s.vacuumOutboxAlone(ctx); err != nil || !did {
		t.Errorf("did not vacuum with the outbox free: %v, %v", did, err)
	}
	if got := vacuums("webhookd_outbox"); got != outbox+1 {
		t.Errorf("outbox vacuumed %d times, want %d", got, outbox+1)
	}

	conn, err := s.vacuumConn(ctx, new(bool))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var timeout string
	if err := conn.QueryRow(ctx, `SHOW statement_timeout`).Scan(&timeout); err != nil || timeout != "0" {
		t.Errorf("statement_timeout %q on the vacuum's connection, %v; want 0", timeout, err)
	}
	if err := s.pool.QueryRow(ctx, `SHOW statement_timeout`).Scan(&timeout); err != nil || timeout != "5s" {
		t.Errorf("statement_timeout %q on the pool's connections, %v; want 5s", timeout, err)
	}
}

// TestLanesKeepTheirHeadsAcrossReplicas has three replicas accepting new
// versions of a few resources while they claim and settle them: every
// lane always has its first entry marked head (the due index holds heads
// only, so a lane without one would never be claimed), each resource's
// versions are claimed in order, and the outbox drains to empty.
func TestLanesKeepTheirHeadsAcrossReplicas(t *testing.T) {
	stores := replicas(t, 3)
	var version atomic.Uint64
	var mu sync.Mutex
	claimed := map[string][]uint64{}
	forwardSome := func(s *Store, owner string) int {
		claims, err := s.Claim(ctx, owner, target, 4, time.Minute)
		if err != nil {
			t.Error(err)
			return 0
		}
		for k, c := range claims {
			v, _ := strconv.ParseUint(c.Version, 10, 64)
			mu.Lock()
			claimed[c.Resource] = append(claimed[c.Resource], v)
			mu.Unlock()
			state := webhookd.ForwardDelivered
			if k%3 == 2 {
				state = webhookd.ForwardDead
			}
			if err := s.Settle(ctx, c, forward.Result{State: state, Attempts: 1, Status: 200, At: time.Now()}); err != nil {
				t.Error(err)
			}
		}
		return len(claims)
	}
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			for j := range 80 {
				v := version.Add(1)
				if _, err := s.Decide(ctx, delivery(fmt.Sprintf("r%d-%d", i, j), fmt.Sprint("res", j%5), v, "x")); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() {
			for range 60 {
				forwardSome(s, fmt.Sprint("w", i))
			}
		})
	}
	wg.Wait()
	var headless int
	if err := stores[0].pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT DISTINCT ON (source, route, resource) head FROM webhookd_outbox WHERE resource <> ''
		ORDER BY source, route, resource, seq) f WHERE NOT head`).Scan(&headless); err != nil {
		t.Fatal(err)
	}
	if headless != 0 {
		t.Errorf("%d lanes whose first entry is not marked head", headless)
	}
	for forwardSome(stores[0], "drain") > 0 {
	}
	var left int
	if err := stores[0].pool.QueryRow(ctx, `SELECT count(*) FROM webhookd_outbox`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d entries left that no claim hands out", left)
	}
	for res, vs := range claimed {
		if !slices.IsSorted(vs) {
			t.Errorf("%s claimed out of order: %v", res, vs)
		}
	}
}
