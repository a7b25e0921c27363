package postgres

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/postgres/pgtest"
)

// openLogged opens a store on dsn whose log the test reads; adjust changes
// its fields before Open.
func openLogged(t *testing.T, dsn string, adjust func(*Store)) (*Store, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	s := New(dsn)
	s.Logger = zap.New(core)
	if adjust != nil {
		adjust(s)
	}
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, logs
}

// eventually waits up to 10 s for cond, polling.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 10 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAutovacuumWarning turns autovacuum off for two tables: the next
// store to open warns once, naming the one it leaves to the database
// (receipts), and says that it vacuums the other (the outbox) itself.
func TestAutovacuumWarning(t *testing.T) {
	dsn := pgtest.SchemaDSN(t, t.Name())
	s, logs := openLogged(t, dsn, nil)
	var serverOn bool
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('autovacuum') = 'on'`).Scan(&serverOn); err != nil {
		t.Fatal(err)
	}
	logged := func(l *observer.ObservedLogs, level zapcore.Level) []observer.LoggedEntry {
		return l.FilterMessageSnippet("autovacuum is off").FilterLevelExact(level).AllUntimed()
	}
	if got := logs.FilterMessageSnippet("autovacuum is off").AllUntimed(); serverOn && len(got) != 0 {
		t.Errorf("autovacuum on everywhere, yet logged: %v", got)
	}
	for _, table := range []string{"webhookd_receipts", "webhookd_outbox"} {
		if _, err := s.pool.Exec(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = off)`); err != nil {
			t.Fatal(err)
		}
	}
	_, logs = openLogged(t, dsn, nil)
	tables := func(e observer.LoggedEntry) string { return e.ContextMap()["tables"].(string) }
	warned := logged(logs, zapcore.WarnLevel)
	if len(warned) != 1 || !strings.Contains(tables(warned[0]), "webhookd_receipts") || strings.Contains(tables(warned[0]), "webhookd_outbox") {
		t.Errorf("warnings %v, want one naming webhookd_receipts and not webhookd_outbox", warned)
	}
	own := logged(logs, zapcore.InfoLevel)
	if len(own) != 1 || !strings.Contains(tables(own[0]), "webhookd_outbox") {
		t.Errorf("infos %v, want one naming webhookd_outbox", own)
	}
}

// lockTable holds an ACCESS EXCLUSIVE lock on table from another
// connection until the returned function is called.
func lockTable(t *testing.T, dsn, table string) (release func()) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	released := false
	release = func() {
		if !released {
			released = true
			tx.Rollback(ctx)
			conn.Close(ctx)
		}
	}
	t.Cleanup(release)
	return release
}

// TestNotReadyWhileDecisionsTimeOut holds a lock on the receipts while
// decisions run into the statement timeout: after three in a row the
// store is not ready, though the database answers pings; once the lock is
// gone, a probe (or a decision) makes it ready again.
func TestNotReadyWhileDecisionsTimeOut(t *testing.T) {
	for _, tt := range []struct {
		name     string
		health   time.Duration
		recovers func(*testing.T, *Store)
	}{
		{"by probe", 20 * time.Millisecond, func(t *testing.T, s *Store) {
			eventually(t, "ready", func() bool { return s.Ready() == nil })
		}},
		{"by decision", time.Hour, func(t *testing.T, s *Store) {
			if out, err := s.Decide(ctx, delivery("after", "", 0, "x")); err != nil || out.Decision != webhookd.Accepted {
				t.Fatalf("a decision after the lock: %+v, %v", out, err)
			}
			if err := s.Ready(); err != nil {
				t.Errorf("Ready after a decision completed: %v", err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dsn := pgtest.SchemaDSN(t, t.Name())
			s, logs := openLogged(t, dsn, func(s *Store) {
				s.StatementTimeout, s.HealthInterval = 200*time.Millisecond, tt.health
			})
			release := lockTable(t, dsn, "webhookd_receipts")
			for i := range maxDecisionTimeouts {
				if err := s.Ready(); err != nil {
					t.Fatalf("after %d timed-out decisions: Ready %v", i, err)
				}
				if _, err := s.Decide(ctx, delivery(fmt.Sprint("req-", i), "", 0, "x")); webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
					t.Fatalf("Decide under a lock: %v, want unavailable", err)
				}
			}
			if err := s.Ready(); webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
				t.Fatalf("Ready after %d timed-out decisions: %v, want unavailable", maxDecisionTimeouts, err)
			}
			if err := s.available(); err != nil {
				t.Errorf("the database still answers, yet: %v", err)
			}
			release()
			tt.recovers(t, s)
			if n := logs.FilterMessageSnippet("decisions time out").Len(); n != 1 {
				t.Errorf("%d lines saying decisions time out, want 1", n)
			}
			if n := logs.FilterMessageSnippet("decisions complete again").Len(); n != 1 {
				t.Errorf("%d lines saying decisions complete again, want 1", n)
			}
		})
	}
}

// TestTerminatedConnections terminates every backend of the store's pool,
// as a database restart or an idle timeout does: the next decision gets a
// new connection and succeeds.
func TestTerminatedConnections(t *testing.T) {
	app := "webhookd-terminated-" + fmt.Sprint(time.Now().UnixNano())
	dsn := pgtest.SchemaDSN(t, t.Name()) + "&application_name=" + app
	s, _ := openLogged(t, dsn, func(s *Store) { s.HealthInterval = time.Hour })
	// Several connections in the pool, idle.
	conns := make([]*pgxpool.Conn, 4)
	for i := range conns {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	for _, c := range conns {
		c.Release()
	}
	admin, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil || n < len(conns) {
		t.Fatalf("terminated %d backends, %v; want %d at least", n, err, len(conns))
	}
	eventually(t, "terminated", func() bool {
		admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n)
		return n == 0
	})
	for i := range 3 {
		if out, err := s.Decide(ctx, delivery(fmt.Sprint("req-", i), "", 0, "x")); err != nil || out.Decision != webhookd.Accepted {
			t.Fatalf("decision %d after the backends were terminated: %+v, %v; want accepted", i, out, err)
		}
	}
}

// TestOutageLogs loses the database under a store that keeps deciding and
// probing: the outage is logged when it starts and when it ends, not at
// every failed batch and probe.
func TestOutageLogs(t *testing.T) {
	target := pgtest.HostPort(t)
	p := startProxy(t, "127.0.0.1:0", target)
	dsn := strings.Replace(pgtest.SchemaDSN(t, t.Name()), target, p.addr, 1)
	s, logs := openLogged(t, dsn, func(s *Store) { s.HealthInterval = 100 * time.Millisecond })
	p.stop()
	for i := range 20 {
		if _, err := s.Decide(ctx, delivery(fmt.Sprint("req-", i), "", 0, "x")); webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
			t.Fatalf("Decide without a database: %v, want unavailable", err)
		}
	}
	startProxy(t, p.addr, target)
	eventually(t, "ready", func() bool { return s.Ready() == nil })
	if _, err := s.Decide(ctx, delivery("back", "", 0, "x")); err != nil {
		t.Fatal(err)
	}
	// A slow machine may miss a ping after the outage, which is logged as
	// an outage of its own, with its end.
	down, up := logs.FilterMessageSnippet("database unavailable").Len(), logs.FilterMessage("database answers again").Len()
	if down == 0 || up == 0 || down > up+1 {
		t.Errorf("%d lines saying the database is unavailable, %d saying it answers again; want one each per outage", down, up)
	}
	if n := logs.FilterMessage("decide batch").Len(); n != 1 {
		t.Errorf("%d lines for 20 failed decision batches, want 1", n)
	}
	if n := logs.FilterMessage("decide batches complete again").Len(); n != 1 {
		t.Errorf("%d lines saying decisions complete again, want 1", n)
	}
}

// TestPlansWithoutStatistics fills tables that were never analyzed, as
// with autovacuum off, and checks that the statements that run all the
// time look rows up by index, as planned when they run: a plan that scans
// a whole table costs more with every row it grows by.
func TestPlansWithoutStatistics(t *testing.T) {
	s, _ := openLogged(t, pgtest.SchemaDSN(t, t.Name()), nil)
	// A connection that claims and decides while the tables are empty: the
	// statements it prepares keep the generic plans made then.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	genericPlan := func(execute string) string {
		t.Helper()
		b := &pgx.Batch{}
		b.Queue(forceGenericPlans)
		b.Queue("EXPLAIN EXECUTE " + execute)
		res := conn.SendBatch(ctx, b)
		defer res.Close()
		if _, err := res.Exec(); err != nil {
			t.Fatal(err)
		}
		rows, err := res.Query()
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	claimPlan := func() string {
		return genericPlan(claimStatement + "('billing', now(), 64, 'owner', now() + interval '1 minute', 'r0')")
	}
	if _, err := conn.Conn().Prepare(ctx, claimStatement, claim); err != nil {
		t.Fatal(err)
	}
	empty := claimPlan()
	// A generic plan is made for no parameters' values: NULLs stand in.
	writes := make(map[string]string)
	for _, p := range preparedWrites {
		sd, err := conn.Conn().Prepare(ctx, p.name, p.sql)
		if err != nil {
			t.Fatal(err)
		}
		writes[p.name] = p.name + "(" + strings.Repeat("NULL, ", len(sd.ParamOIDs)-1) + "NULL)"
		genericPlan(writes[p.name])
	}
	for _, sql := range []string{
		`INSERT INTO webhookd_receipts (source, request_id, resource, version, decision, duplicate_decision,
			ordering_decision, latest_version_at_decision, payload_sha256, first_seen, last_seen, attempts, deliveries,
			unrouted, routes, expires_at)
		SELECT 'billing', 'req-' || i, 'sub-' || i, '1', 'accepted', 'new', 'first', '', 'sha', now(), now(), 1, '[]',
			false, '{"r0": {"position": 0, "state": "pending", "attempts": 0}}', now() + interval '1 day'
		FROM generate_series(1, 20000) AS i`,
		`INSERT INTO webhookd_latest (source, resource, version, ord, request_id, updated_at)
		SELECT 'billing', 'sub-' || i, '1', 1, 'req-' || i, now() FROM generate_series(1, 20000) AS i`,
		`INSERT INTO webhookd_payloads (source, request_id, resource, version, content_type, headers, created_at, body,
			expires_at)
		SELECT 'billing', 'req-' || i, 'sub-' || i, '1', '', '{}', now(), '', now() + interval '1 day'
		FROM generate_series(1, 20000) AS i`,
		`INSERT INTO webhookd_outbox (source, route, request_id, resource, version, content_type, headers, created_at,
			next_attempt_at)
		SELECT 'billing', 'r' || (i % 3), 'req-' || i, 'sub-' || (i % 5000), '1', '', '{}', now(), now() - interval '1 hour'
		FROM generate_series(1, 20000) AS i`,
		`INSERT INTO webhookd_dead_letters (source, route, request_id, resource, version, content_type, headers,
			created_at, attempts, next_attempt_at, last_status, last_error, dead_at, body)
		SELECT 'billing', 'r' || (i % 3), 'req-' || i, 'sub-' || (i % 5000), '1', '', '{}',
			now() - i * interval '1 ms', 1, now(), 400, '', now(), ''
		FROM generate_series(1, 20000) AS i`,
	} {
		if _, err := s.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	sources, ids, resources, routes := make([]string, 64), make([]string, 64), make([]string, 64), make([]string, 64)
	for i := range sources {
		sources[i], ids[i], resources[i], routes[i] = "billing", fmt.Sprint("req-", i*300), fmt.Sprint("sub-", i*300), fmt.Sprint("r", i*300%3)
	}
	now := time.Now()
	var settles settleSet
	for i := range ids {
		c := forward.Claim{Entry: forward.Entry{Seq: uint64(i * 300), Source: "billing", Route: routes[i], RequestID: ids[i],
			CreatedAt: now}, Token: 1}
		eff := forward.Apply(c.Entry, forward.Result{State: webhookd.ForwardDead, At: now})
		if err := settles.add(i, &c, &eff); err != nil {
			t.Fatal(err)
		}
	}
	settling := settles.args(forward.Bury)
	texts := func(v string) []string { return slices.Repeat([]string{v}, len(sources)) }
	times := slices.Repeat([]time.Time{now}, len(sources))
	for _, tt := range []struct {
		name, sql string
		args      []any
		avoid     string // what the plan must not do
		want      string // what it must do
	}{
		{"readReceipts", readReceipts, []any{sources, ids, now}, "Seq Scan on webhookd_receipts", "webhookd_receipts_pkey"},
		{"readLatest", readLatest, []any{sources, resources}, "Seq Scan on webhookd_latest", "webhookd_latest_pkey"},
		// The rows to delete are found by their expiry; the delete itself
		// may join them either way, as the table's size says.
		{"expireReceipts", expireReceipts, []any{now, 1000}, "Filter: (expires_at <=", "webhookd_receipts_expires_at"},
		{"expirePayloads", expirePayloads, []any{now, 1000}, "Filter: (expires_at <=", "webhookd_payloads_expires_at"},
		{"lockReceipts", lockReceipts, []any{sources, ids, now}, "Seq Scan on webhookd_receipts", "webhookd_receipts_pkey"},
		{"lockDeadLetters", lockDeadLetters, []any{sources, routes, ids, true}, "Seq Scan on webhookd_dead_letters", "webhookd_dead_letters_pkey"},
		{"lockLatests", lockLatests, []any{sources, resources}, "Seq Scan on webhookd_latest", "webhookd_latest_pkey"},
		{"lockSettling", lockSettling, []any{sources, ids}, "Seq Scan on webhookd_receipts", "webhookd_receipts_pkey"},
		// A settle finds its entries and their receipts by primary key.
		{"settleRemove", settleRemove, settling[:7], "Seq Scan", "webhookd_outbox_pkey"},
		{"settleReschedule", settleReschedule, settling[:11], "Seq Scan", "webhookd_outbox_pkey"},
		{"settleBury", settleBury, settling, "Seq Scan", "webhookd_outbox_pkey"},
		// Whether an entry is its lane's head is one probe of the lane.
		{"insertOutbox", insertOutbox, []any{sources, routes, ids, resources, texts("2"), texts(""), texts("{}"), texts(""), times, times},
			"Seq Scan on webhookd_outbox", "webhookd_outbox_lane"},
	} {
		rows, err := s.pool.Query(ctx, "EXPLAIN "+tt.sql, tt.args...)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if plan := strings.Join(lines, "\n"); strings.Contains(plan, tt.avoid) || !strings.Contains(plan, tt.want) {
			t.Errorf("%s: want %q in the plan and no %q:\n%s", tt.name, tt.want, tt.avoid, plan)
		}
	}

	// A page of a list, planned as withIndexOrder plans it, walks an
	// index from its cursor in the list's order, and stops at its limit,
	// rather than fetch every row after the cursor and sort them.
	inf := pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	negInf := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	for _, tt := range []struct {
		name, sql string
		args      []any
		want      string
	}{
		{"searchReceipts", searchReceipts, []any{inf, "", "", negInf, 10000, now, "", "", "r0", "dead", 101},
			"Index Scan Backward using webhookd_receipts_seen"},
		{"searchSourceReceipts", searchSourceReceipts, []any{inf, "billing", "", negInf, 10000, now, "accepted", "", "", "", 101},
			"Index Scan Backward using webhookd_receipts_source_seen"},
		{"listOutbox", listOutbox, []any{"billing", "r1", 5000, 101}, "Index Scan using webhookd_outbox_pkey"},
		{"listDeadLetters", listDeadLetters, []any{"billing", "", "billing", "r1", "req-1", 101}, "Index Scan using webhookd_dead_letters_pkey"},
		{"pageDeadLetters", pageDeadLetters, []any{"billing", "r2", negInf, "", "", "", negInf, inf, 1001},
			"Index Scan using webhookd_dead_letters_created"},
	} {
		err := withIndexOrder(ctx, s.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "EXPLAIN "+tt.sql, tt.args...)
			if err != nil {
				return err
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if plan := strings.Join(lines, "\n"); err == nil && (strings.Contains(plan, "Sort") || !strings.Contains(plan, tt.want)) {
				t.Errorf("%s: want %q and no sort:\n%s", tt.name, tt.want, plan)
			}
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
	}

	// A bulk page's writes over its key arrays, planned as bulkPlanning
	// plans them, look each key up by the primary key.
	for _, tt := range []struct {
		name, sql string
		args      []any
		table     string
	}{
		{"deleteDeadLetters", deleteDeadLetters, []any{sources, routes, ids}, "webhookd_dead_letters"},
		{"mergeManyRoutes", mergeManyRoutes, []any{sources, ids, times, ids}, "webhookd_receipts"},
	} {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := bulkPlanning(ctx, tx); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, "EXPLAIN "+tt.sql, tt.args...)
			if err != nil {
				return err
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if plan := strings.Join(lines, "\n"); err == nil && (strings.Contains(plan, "Seq Scan on "+tt.table) || !strings.Contains(plan, tt.table+"_pkey")) {
				t.Errorf("%s: want lookups by %s_pkey and no scan of the table:\n%s", tt.name, tt.table, plan)
			}
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
	}

	// The claim, planned as leaseHeads plans it, walks the due index in
	// order and stops at its limit, rather than reading and sorting every
	// due entry, with the plan it made on the empty outbox too.
	for name, plan := range map[string]string{"empty": empty, "filled": claimPlan()} {
		if strings.Contains(plan, "Sort") || !strings.Contains(plan, "Index Scan using webhookd_outbox_due") {
			t.Errorf("claim planned on the %s outbox: want an ordered scan of webhookd_outbox_due and no sort:\n%s", name, plan)
		}
	}

	// The prepared writes read no table but through the primary key that
	// arbitrates their conflicts: their generic plans, made on the empty
	// tables, suit the tables at any size.
	scan := regexp.MustCompile(`Scan.* on webhookd_`)
	for name, execute := range writes {
		if plan := genericPlan(execute); scan.MatchString(plan) || !strings.Contains(plan, "Conflict Arbiter Indexes: webhookd_") {
			t.Errorf("%s: want no scan of a table, and a conflict arbiter:\n%s", name, plan)
		}
	}

	// No other statement is prepared on a connection, so none that reads a
	// table keeps a generic plan made while its tables were small.
	for range 10 {
		rows, err := conn.Query(ctx, readReceipts, sources, ids, now)
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	var prepared []string
	rows, err := conn.Query(ctx, `SELECT name FROM pg_prepared_statements`)
	if err == nil {
		prepared, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	want := []string{claimStatement, insertReceiptsStatement, upsertLatestStatement, upsertPayloadsStatement}
	slices.Sort(prepared)
	slices.Sort(want)
	if err != nil || !slices.Equal(prepared, want) {
		t.Errorf("statements prepared on the connection: %q, %v; want %q", prepared, err, want)
	}
}

// TestClaimsWriteNoIndexEntries claims entries from a full page of the
// outbox: their new versions fit in the room the page keeps, so each
// claim is a HOT update, which writes no index entry. Statistics reach
// pg_stat_user_tables once the backend flushes them; the test waits for
// the count of updates to arrive.
func TestClaimsWriteNoIndexEntries(t *testing.T) {
	s, _ := openLogged(t, pgtest.SchemaDSN(t, t.Name()), func(s *Store) { s.PoolSize = 1 })
	if _, err := s.pool.Exec(ctx, backlog, 1000); err != nil {
		t.Fatal(err)
	}
	claims, err := s.Claim(ctx, "owner", forward.Target{Source: "billing", Route: "default"}, 8, time.Minute)
	if err != nil || len(claims) != 8 {
		t.Fatalf("%d claims, %v", len(claims), err)
	}
	for range 100 {
		var updates, hot int64
		if _, err := s.pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if err := s.pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE relid = to_regclass('webhookd_outbox')`).Scan(&updates, &hot); err != nil {
			t.Fatal(err)
		}
		if updates >= 8 {
			if hot != updates {
				t.Errorf("%d of the claims' %d updates were HOT; want all", hot, updates)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the claims' updates never reached pg_stat_user_tables")
}
