package postgres

// Every statement is a constant with parameters. Times come from the
// store's clock ($now), never from the database's, so that every replica
// and test decides expiry and leases by the one clock it is given.

const receiptColumns = `source, request_id, resource, version, decision, duplicate_decision, ordering_decision,
	latest_version_at_decision, payload_sha256, first_seen, last_seen, attempts, deliveries, unrouted, routes`

// Decisions.
const (
	// readReceipts: $1 sources, $2 request IDs, $3 now. One primary-key
	// lookup a key, whatever the table's statistics say: the LIMIT keeps
	// the planner from flattening the LATERAL subquery into a join, which
	// it plans as a hash join over a scan of the whole table when its
	// statistics are missing or older than the table's growth.
	readReceipts = `SELECT r.* FROM unnest($1::text[], $2::text[]) AS k(s, id)
	JOIN LATERAL (SELECT ` + receiptColumns + ` FROM webhookd_receipts
		WHERE source = k.s AND request_id = k.id AND expires_at > $3 LIMIT 1) r ON true`

	// readLatest: $1 sources, $2 resources. One primary-key lookup a
	// resource, as in readReceipts.
	readLatest = `SELECT l.source, l.resource, l.version, l.ord, l.request_id, l.updated_at
	FROM unnest($1::text[], $2::text[]) AS k(s, res)
	JOIN LATERAL (SELECT * FROM webhookd_latest l WHERE l.source = k.s AND l.resource = k.res LIMIT 1) l ON true`

	// insertReceipts writes new receipts, with every route's status
	// pending, over expired ones ($17: now) but never over a live one:
	// that row is not written, and the batch is planned again.
	insertReceipts = `INSERT INTO webhookd_receipts (source, request_id, resource, version, decision, duplicate_decision,
		ordering_decision, latest_version_at_decision, payload_sha256, first_seen, last_seen, attempts, deliveries,
		unrouted, routes, expires_at)
	SELECT s, id, res, v, d, dd, od, lv, sha, fs, ls, a, dl::jsonb, u, rt::jsonb, ex
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
		$9::text[], $10::timestamptz[], $11::timestamptz[], $12::integer[], $13::text[], $14::boolean[], $15::text[],
		$16::timestamptz[])
		AS x(s, id, res, v, d, dd, od, lv, sha, fs, ls, a, dl, u, rt, ex)
	ON CONFLICT (source, request_id) DO UPDATE SET
		resource = excluded.resource, version = excluded.version, decision = excluded.decision,
		duplicate_decision = excluded.duplicate_decision, ordering_decision = excluded.ordering_decision,
		latest_version_at_decision = excluded.latest_version_at_decision, payload_sha256 = excluded.payload_sha256,
		first_seen = excluded.first_seen, last_seen = excluded.last_seen, attempts = excluded.attempts,
		deliveries = excluded.deliveries, unrouted = excluded.unrouted, routes = excluded.routes,
		expires_at = excluded.expires_at
	WHERE webhookd_receipts.expires_at <= $17`

	// updateReceipts records more deliveries of held receipts, each if its
	// attempts are still what the batch read ($4): otherwise another
	// delivery came in between. The routes' statuses are Settle's and are
	// left alone.
	updateReceipts = `UPDATE webhookd_receipts r SET attempts = x.a, last_seen = x.ls, deliveries = x.dl::jsonb, expires_at = x.ex
	FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::integer[], $5::integer[], $6::timestamptz[],
		$7::text[], $8::timestamptz[]) AS x(s, id, fs, was, a, ls, dl, ex)
	WHERE r.source = x.s AND r.request_id = x.id AND r.first_seen = x.fs AND r.attempts = x.was`

	// upsertLatest never moves latest versions backwards: to an order not
	// below the current (an equal one is a tie its source accepts), and
	// only from the one the batch read ($7, NULL when it read none), so
	// that no decision rests on a version another transaction replaced.
	upsertLatest = `WITH x AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::timestamptz[], $7::bigint[])
			AS x(s, res, v, o, id, at, was)
	)
	INSERT INTO webhookd_latest (source, resource, version, ord, request_id, updated_at)
	SELECT s, res, v, o, id, at FROM x
	ON CONFLICT (source, resource) DO UPDATE SET
		version = excluded.version, ord = excluded.ord, request_id = excluded.request_id, updated_at = excluded.updated_at
	WHERE excluded.ord >= webhookd_latest.ord
		AND webhookd_latest.ord = (SELECT was FROM x WHERE x.s = excluded.source AND x.res = excluded.resource)`

	// insertOutbox appends entries in the order given, which is each
	// lane's version order: seq follows ORDER BY. An entry is its lane's
	// head unless an earlier one of the batch or a row of the lane is
	// there; the lock on that row keeps it until this commits, so the
	// trigger that promotes the next entry when it goes sees this one
	// (webhookd_outbox_promote). The row is the lane's last, which no
	// settle is deleting while the lane has a head before it. SKIP LOCKED
	// keeps decisions from waiting for a settle: a lane whose last row is
	// locked takes the entry as a head, which the claim's own check of
	// the lane corrects.
	insertOutbox = `INSERT INTO webhookd_outbox (source, route, request_id, resource, version, content_type, headers,
		trace, created_at, next_attempt_at, head)
	SELECT s, rt, id, res, v, ct, h::jsonb, tr, c, n,
		res = '' OR (i = min(i) OVER (PARTITION BY s, rt, res) AND NOT EXISTS (
			SELECT 1 FROM webhookd_outbox p WHERE p.source = s AND p.route = rt AND p.resource = res
			ORDER BY p.seq DESC LIMIT 1 FOR KEY SHARE SKIP LOCKED))
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
		$9::timestamptz[], $10::timestamptz[]) WITH ORDINALITY AS x(s, rt, id, res, v, ct, h, tr, c, n, i)
	ORDER BY i`

	// upsertPayloads replaces what an earlier receipt of a request ID
	// left: an entry that outlived that receipt finds created_at changed
	// and takes no body.
	upsertPayloads = `INSERT INTO webhookd_payloads (source, request_id, resource, version, content_type, headers,
		trace, created_at, body, expires_at)
	SELECT s, id, res, v, ct, h::jsonb, tr, c, b, ex
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[],
		$9::bytea[], $10::timestamptz[]) AS x(s, id, res, v, ct, h, tr, c, b, ex)
	ON CONFLICT (source, request_id) DO UPDATE SET
		resource = excluded.resource, version = excluded.version, content_type = excluded.content_type,
		headers = excluded.headers, trace = excluded.trace, created_at = excluded.created_at, body = excluded.body,
		expires_at = excluded.expires_at`
)

const entryColumns = `source, route, request_id, resource, version, content_type, headers, trace, created_at, attempts,
	next_attempt_at, last_status, last_error`

// The queue.
const (
	// claim leases the due lane heads of one target, a source's route:
	// entries with no entry before them in their lane (an entry without a
	// resource is alone in its own), not leased or whose lease ended. It
	// walks the due index, which holds the entries marked head, and checks
	// the lane of each, as a mark may be set on an entry behind another
	// (insertOutbox). FOR NO KEY UPDATE, the lock its UPDATE takes, lets
	// a decision's FOR KEY SHARE on a lane's row stand beside it. SKIP
	// LOCKED passes over rows another claim or settle holds right now. $1
	// source, $2 now, $3 n, $4 owner, $5 lease end, $6 route. Lanes are
	// per route, so a route's heads wait for nothing of another route's.
	claim = `WITH heads AS (
		SELECT o.seq FROM webhookd_outbox o
		WHERE o.source = $1 AND o.route = $6 AND o.head AND o.next_attempt_at <= $2
		AND (o.lease_until IS NULL OR o.lease_until <= $2)
		AND (o.resource = '' OR NOT EXISTS (
			SELECT 1 FROM webhookd_outbox p
			WHERE p.source = o.source AND p.route = o.route AND p.resource = o.resource AND p.seq < o.seq))
		ORDER BY o.next_attempt_at, o.seq
		LIMIT $3
		FOR NO KEY UPDATE OF o SKIP LOCKED
	)
	UPDATE webhookd_outbox o SET lease_owner = $4, lease_token = nextval('webhookd_lease_tokens'), lease_until = $5
	FROM heads WHERE o.seq = heads.seq
	RETURNING o.seq, o.source, o.route, o.request_id, o.resource, o.version, o.content_type, o.headers, o.trace,
		o.created_at, o.attempts, o.next_attempt_at, o.last_status, o.last_error, o.lease_token,
		(SELECT p.body FROM webhookd_payloads p WHERE p.source = o.source AND p.request_id = o.request_id
			AND p.created_at = o.created_at AND p.expires_at > $2),
		o.resource <> '' AND EXISTS (SELECT 1 FROM webhookd_outbox n
			WHERE n.source = o.source AND n.route = o.route AND n.resource = o.resource AND n.seq > o.seq)`

	// claimStatement names claim prepared on a connection (leaseHeads).
	claimStatement = "webhookd_claim"

	// The names of a decision's writes that are prepared on a connection
	// (preparedWrites).
	insertReceiptsStatement = "webhookd_insert_receipts"
	upsertLatestStatement   = "webhookd_upsert_latest"
	upsertPayloadsStatement = "webhookd_upsert_payloads"

	// forceGenericPlans plans the rest of its transaction's statements
	// without their parameters' values (see leaseHeads). It is set_config
	// rather than SET LOCAL, which warns in the server's log when its
	// transaction is a batch's implicit one.
	forceGenericPlans = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`

	// noSorts: see withIndexOrder.
	noSorts = `SET LOCAL enable_sort = off`

	// bulkPlans: see bulkPlanning.
	bulkPlans = `SELECT set_config('enable_sort', 'off', true), set_config('enable_hashjoin', 'off', true)`

	// lockSettling locks the receipts of a settle batch, $1 sources and
	// $2 request IDs in key order, one primary-key lookup each (see
	// readReceipts), in the order given. The batch's statements then
	// write only receipts it holds: an UPDATE locks rows in whatever
	// order its plan visits them, and two replicas settling routes of the
	// same receipts would otherwise wait on each other in a cycle.
	lockSettling = `SELECT 1 FROM unnest($1::text[], $2::text[]) AS k(s, id)
	JOIN LATERAL (SELECT 1 FROM webhookd_receipts WHERE source = k.s AND request_id = k.id LIMIT 1 FOR UPDATE) r ON true`

	// settleArgs are the arrays every settle statement takes, one element
	// a claim: $1 seqs, $2 tokens, $3 sources, $4 request IDs, $5
	// created_at, $6 routes, $7 statuses (settledStatus). settleColumns
	// name them in the statements' unnest.
	settleArgs    = `$1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $7::text[]`
	settleColumns = `seq, tok, s, id, fs, rt, st`

	// settleClaimed selects the outbox rows whose claims still hold them,
	// the claims x: o.seq = ANY($1) walks the primary key for them,
	// whatever the planner guesses of the join.
	settleClaimed = `o.seq = ANY($1) AND o.seq = x.seq AND o.lease_token = x.tok AND o.lease_until IS NOT NULL`

	// setRouteStatuses writes the statuses of the routes settled, once
	// the claims held, into their receipts, one update a receipt however
	// many of its routes settle: each status object replaces its route's
	// fields but its position. Only routes of the receipt the entry
	// belongs to (first seen at the entry's created_at) are written.
	setRouteStatuses = `UPDATE webhookd_receipts r SET routes = r.routes || (
			SELECT coalesce(jsonb_object_agg(k, (r.routes -> k) || v), '{}') FROM jsonb_each(u.routes) AS e(k, v)
			WHERE r.routes ? k)
		FROM (SELECT x.s, x.id, x.fs, jsonb_object_agg(x.rt, x.st::jsonb ORDER BY x.i) AS routes
			FROM x JOIN settled USING (seq, tok) GROUP BY x.s, x.id, x.fs) u
		WHERE r.source = u.s AND r.request_id = u.id AND r.first_seen = u.fs`

	// settleRemove deletes delivered and superseded entries whose claims
	// still hold them, records their routes' statuses and returns the
	// tokens of the claims it settled. settleArgs only.
	settleRemove = `WITH x AS (
		SELECT * FROM unnest(` + settleArgs + `) WITH ORDINALITY AS x(` + settleColumns + `, i)
	), settled AS (
		DELETE FROM webhookd_outbox o USING x WHERE ` + settleClaimed + ` RETURNING o.seq, o.lease_token AS tok
	), status AS (` + setRouteStatuses + `)
	SELECT array(SELECT tok FROM settled)`

	// settleReschedule keeps the entries, each due at its next attempt
	// ($11), and ends their leases; the tokens stay, so that settling a
	// claim again is known for a repeat. $8 attempts, $9 last statuses,
	// $10 last errors; otherwise as settleRemove.
	settleReschedule = `WITH x AS (
		SELECT * FROM unnest(` + settleArgs + `, $8::integer[], $9::integer[], $10::text[], $11::timestamptz[])
			WITH ORDINALITY AS x(` + settleColumns + `, a, ls, le, n, i)
	), settled AS (
		UPDATE webhookd_outbox o SET attempts = x.a, next_attempt_at = x.n, last_status = x.ls, last_error = x.le,
			lease_owner = NULL, lease_until = NULL
		FROM x WHERE ` + settleClaimed + ` RETURNING o.seq, o.lease_token AS tok
	), status AS (` + setRouteStatuses + `)
	SELECT array(SELECT tok FROM settled)`

	// settleBury moves the entries to the dead letters of their routes,
	// each with the body its claim carried ($17, NULL when its payload had
	// expired). $8-$11 as in settleReschedule, $12 dead_at, $13-$16 and
	// $18 the rest of the entries. Of two entries of one dead letter's key
	// the later in the arrays is the one kept, as if buried one by one.
	settleBury = `WITH x AS (
		SELECT * FROM unnest(` + settleArgs + `, $8::integer[], $9::integer[], $10::text[], $11::timestamptz[],
			$12::timestamptz[], $13::text[], $14::text[], $15::text[], $16::text[], $17::bytea[], $18::text[])
			WITH ORDINALITY AS x(` + settleColumns + `, a, ls, le, n, dead, res, v, ct, h, b, tr, i)
	), settled AS (
		DELETE FROM webhookd_outbox o USING x WHERE ` + settleClaimed + ` RETURNING o.seq, o.lease_token AS tok
	), status AS (` + setRouteStatuses + `), dead AS (
		INSERT INTO webhookd_dead_letters (source, route, request_id, resource, version, content_type, headers,
			trace, created_at, attempts, next_attempt_at, last_status, last_error, dead_at, body, token)
		SELECT DISTINCT ON (x.s, x.rt, x.id) x.s, x.rt, x.id, x.res, x.v, x.ct, x.h::jsonb, x.tr, x.fs, x.a, x.n, x.ls,
			x.le, x.dead, x.b, x.tok
		FROM x JOIN settled USING (seq, tok)
		ORDER BY x.s, x.rt, x.id, x.i DESC
		ON CONFLICT (source, route, request_id) DO UPDATE SET
			resource = excluded.resource, version = excluded.version, content_type = excluded.content_type,
			headers = excluded.headers, trace = excluded.trace, created_at = excluded.created_at, attempts = excluded.attempts,
			next_attempt_at = excluded.next_attempt_at, last_status = excluded.last_status,
			last_error = excluded.last_error, dead_at = excluded.dead_at, body = excluded.body, token = excluded.token
	)
	SELECT array(SELECT tok FROM settled)`

	// settled says whether the claim with token $2 on entry $1 was
	// settled already: the entry was rescheduled and still carries the
	// token, or its route's status on the receipt or its dead letter was
	// written by it. $3 source, $4 request ID, $5 route.
	settled = `SELECT EXISTS (SELECT 1 FROM webhookd_outbox WHERE seq = $1 AND lease_token = $2 AND lease_until IS NULL)
		OR EXISTS (SELECT 1 FROM webhookd_receipts WHERE source = $3 AND request_id = $4
			AND (routes -> $5::text ->> 'token')::bigint = $2)
		OR EXISTS (SELECT 1 FROM webhookd_dead_letters WHERE source = $3 AND route = $5 AND request_id = $4 AND token = $2)`
)

// probeDecision takes the table locks a decision's writes take, and writes
// nothing: it waits where a decision would wait, and returns when a
// decision could go on.
const probeDecision = `WITH r AS (UPDATE webhookd_receipts SET attempts = attempts WHERE false RETURNING 1),
	l AS (UPDATE webhookd_latest SET ord = ord WHERE false RETURNING 1),
	o AS (UPDATE webhookd_outbox SET attempts = attempts WHERE false RETURNING 1),
	p AS (UPDATE webhookd_payloads SET expires_at = expires_at WHERE false RETURNING 1)
SELECT 1`

// Reads and repairs for the admin API.
const (
	readReceipt = `SELECT ` + receiptColumns + ` FROM webhookd_receipts
	WHERE source = $1 AND request_id = $2 AND expires_at > $3`

	readOneLatest = `SELECT source, resource, version, ord, request_id, updated_at FROM webhookd_latest
	WHERE source = $1 AND resource = $2`

	// lockLatest is readOneLatest holding the row until commit, so that a
	// decision accepting a newer version waits for the requeue before it,
	// and the outbox keeps the lane's version order.
	lockLatest = readOneLatest + ` FOR SHARE`

	// lockReceipt is readReceipt holding the row until commit.
	lockReceipt = readReceipt + ` FOR UPDATE`

	// lockDeadLetter reads a dead letter with its body, holding the row.
	// $1 source, $2 route, $3 request ID.
	lockDeadLetter = `SELECT 0, ` + entryColumns + `, dead_at, body FROM webhookd_dead_letters
	WHERE source = $1 AND route = $2 AND request_id = $3 FOR UPDATE`

	deleteDeadLetter = `DELETE FROM webhookd_dead_letters WHERE source = $1 AND route = $2 AND request_id = $3`

	// lockPayload reads a payload held for the receipt first seen at $3,
	// as an entry of no route.
	lockPayload = `SELECT 0, source, '', request_id, resource, version, content_type, headers, trace, created_at, 0,
		created_at, 0, '', body FROM webhookd_payloads
	WHERE source = $1 AND request_id = $2 AND created_at = $3 AND expires_at > $4 FOR UPDATE`

	// mergeRoutes writes the statuses of some of a receipt's routes
	// outside a settle ($4: an object of whole route statuses, as the
	// routes column holds them), the receipt first seen at $3 locked.
	mergeRoutes = `UPDATE webhookd_receipts SET routes = routes || $4::jsonb
	WHERE source = $1 AND request_id = $2 AND first_seen = $3`
)

// Expiry: bounded batches, oldest first, skipping rows a transaction holds
// right now. ORDER BY walks the expires_at index whatever the statistics
// say; without it, a table never analyzed is read whole every minute, as
// the planner guesses a third of its rows expired.
const (
	expireReceipts = `DELETE FROM webhookd_receipts WHERE (source, request_id) IN (
		SELECT source, request_id FROM webhookd_receipts WHERE expires_at <= $1
		ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`
	expirePayloads = `DELETE FROM webhookd_payloads WHERE (source, request_id) IN (
		SELECT source, request_id FROM webhookd_payloads WHERE expires_at <= $1
		ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`
)

// Counts: the rows of webhookd_counts add up to how many outbox entries
// ('outbox') and dead letters ('dead') each target has.
const (
	// sumCounts adds up the rows of kind $1 by target; a target with none
	// left is absent. The table holds a row for each target and kind, and
	// one for each statement that changed its count since the last fold:
	// the sum costs the same whatever the number of entries it counts.
	sumCounts = `SELECT source, route, sum(n)::bigint FROM webhookd_counts WHERE kind = $1
	GROUP BY source, route HAVING sum(n) <> 0`

	// foldCounts replaces the rows with their sums, one row a target and
	// kind, in one statement, so that a reader sees the rows before or
	// after it, never between. Every replica folds, and two folds at once
	// stay exact: each deletes the rows its snapshot sees, and one that
	// waits for a row the other deleted skips it once the other commits
	// (under READ COMMITTED a DELETE re-checks a row it waited for), so
	// every row is summed by exactly one fold; the row a fold inserts is
	// not in the other's snapshot, so it is not deleted again; and rows
	// committed after the statement began are left for the next fold.
	foldCounts = `WITH folded AS (DELETE FROM webhookd_counts RETURNING kind, source, route, n)
	INSERT INTO webhookd_counts (kind, source, route, n)
	SELECT kind, source, route, sum(n) FROM folded GROUP BY kind, source, route HAVING sum(n) <> 0`
)

// Vacuums webhookd runs itself, of the tables autovacuum leaves alone
// that it rewrites all the time (vacuum.go). VACUUM takes no parameters
// and runs outside a transaction.
const (
	// SKIP_LOCKED leaves the table to a VACUUM another replica runs right
	// now.
	vacuumCounts = `VACUUM (SKIP_LOCKED) webhookd_counts`
	vacuumOutbox = `VACUUM (SKIP_LOCKED) webhookd_outbox`

	// mayVacuum names those of the tables ($1) this user may vacuum: as
	// their owner (or a role with its privileges, a superuser) or as the
	// database's owner. Anyone else's VACUUM skips the table with a
	// warning and succeeds.
	mayVacuum = `SELECT c.relname FROM unnest($1::text[]) AS t(name)
	JOIN pg_class c ON c.oid = to_regclass(t.name)
	WHERE pg_has_role(c.relowner, 'USAGE')
		OR pg_has_role((SELECT datdba FROM pg_database WHERE datname = current_database()), 'USAGE')`

	// outboxDead says whether the outbox has at least $1 dead rows and $2
	// of its live ones, by the statistics system's counts, which it keeps
	// with autovacuum off.
	outboxDead = `SELECT n_dead_tup >= $1 + $2 * n_live_tup FROM pg_stat_user_tables
	WHERE relid = to_regclass('webhookd_outbox')`
)
