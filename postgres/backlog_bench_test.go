package postgres

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookd/webhookd/postgres/pgtest"
)

// backlog fills the outbox of target with $1 entries shaped as a backlog
// behind a downstream that fails some resources: the first half in ten deep
// lanes whose heads are retrying an hour from now (five) or in flight
// (five) while the versions behind them are due, then the second half in
// lanes of four, due after them; the first entry of each lane is its
// head, as insertOutbox marks it. ORDER BY names g.i, as i alone is the
// output column i::text.
const backlog = `INSERT INTO webhookd_outbox (source, route, request_id, resource, version, content_type, headers,
		created_at, attempts, next_attempt_at, lease_owner, lease_token, lease_until, head)
	SELECT 'billing', 'default', 'req-' || i,
		CASE WHEN i <= $1::integer / 2 THEN 'deep-' || (i % 10) ELSE 'res-' || (i / 4) END,
		i::text, 'application/json', '{}', now() - interval '1 hour' + i * interval '1 microsecond',
		CASE WHEN i <= 10 THEN 3 ELSE 0 END,
		CASE WHEN i <= 5 THEN now() + interval '1 hour' ELSE now() - interval '1 hour' + i * interval '1 microsecond' END,
		CASE WHEN i BETWEEN 6 AND 10 THEN 'other' END,
		CASE WHEN i BETWEEN 6 AND 10 THEN 1 END,
		CASE WHEN i BETWEEN 6 AND 10 THEN now() + interval '1 hour' END,
		CASE WHEN i <= $1::integer / 2 THEN i <= 10 ELSE i = $1::integer / 2 + 1 OR i % 4 = 0 END
	FROM generate_series(1, $1::integer) AS g(i) ORDER BY g.i`

// backlogs are the outbox depths the backlog benchmarks compare: a claim
// and a count are to cost the same at both.
var backlogs = []int{100, 1_000_000}

// openBacklog is openBench with a statement timeout long enough to fill
// and empty a backlog of a million in one statement, and no VACUUM of
// the outbox but the benchmark's own.
func openBacklog(b *testing.B) *Store {
	b.Helper()
	s := New(pgtest.SchemaDSN(b, b.Name()))
	s.Logger = zap.NewNop()
	s.StatementTimeout, s.VacuumInterval = 5*time.Minute, time.Hour
	if err := s.Open(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkClaim measures one claim of 8 lane heads from a backlog
// (backlog) and from 100 entries after a million were inserted and deleted
// with no VACUUM between (dead=), or with the VACUUM webhookd runs where
// autovacuum does not (dead=,vacuumed). The claims' leases end at once,
// so that every claim finds the same heads. An op is one claim.
func BenchmarkClaim(b *testing.B) {
	for _, n := range backlogs {
		b.Run(fmt.Sprintf("backlog=%d", n), func(b *testing.B) {
			s := openBacklog(b)
			fill(b, s, backlog, n)
			benchClaims(b, s)
		})
	}
	for _, vacuum := range []bool{false, true} {
		name := "dead=1000000"
		if vacuum {
			name += ",vacuumed"
		}
		b.Run(name, func(b *testing.B) {
			s := openBacklog(b)
			fill(b, s, backlog, 1_000_000)
			fill(b, s, `DELETE FROM webhookd_outbox WHERE seq <= $1`, 1_000_000)
			if vacuum {
				if did, err := s.vacuumOutboxAlone(ctx); err != nil || !did {
					b.Fatalf("vacuum: %v, %v", did, err)
				}
			}
			fill(b, s, backlog, 100)
			benchClaims(b, s)
		})
	}
}

func benchClaims(b *testing.B, s *Store) {
	for b.Loop() {
		claims, err := s.Claim(ctx, "bench", target, 8, 0)
		if err != nil || len(claims) != 8 {
			b.Fatalf("%d claims, %v", len(claims), err)
		}
	}
}

// BenchmarkPending measures Pending and DeadLetterCounts over a backlog of
// as many entries and as many dead letters. An op is one of each, as a
// metrics scrape reads them.
func BenchmarkPending(b *testing.B) {
	for _, n := range backlogs {
		b.Run(fmt.Sprintf("backlog=%d", n), func(b *testing.B) {
			s := openBacklog(b)
			fill(b, s, backlog, n)
			fill(b, s, `INSERT INTO webhookd_dead_letters (source, route, request_id, resource, version, content_type,
					headers, created_at, attempts, next_attempt_at, last_status, last_error, dead_at, body)
				SELECT 'billing', 'default', 'req-' || i, 'res-' || i, '', 'application/json', '{}', now(), 1, now(),
					400, '', now(), '{}'
				FROM generate_series(1, $1::integer) AS i`, n)
			for b.Loop() {
				pending, err := s.Pending(ctx)
				if err != nil || pending[target] != n {
					b.Fatalf("pending %v, %v", pending, err)
				}
				dead, err := s.DeadLetterCounts()
				if err != nil || dead[target] != n {
					b.Fatalf("dead letters %v, %v", dead, err)
				}
			}
		})
	}
}
