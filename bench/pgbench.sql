-- bench/pgbench.sql: for bench/run.sh --postgres, the database's own
-- ceiling: per transaction, the three statements an accepted delivery
-- writes in webhookd's schema (its receipt, its resource's latest version
-- if newer, its outbox entry), one row each, with random keys.
\set n random(1, 9000000000000000000)
\set r random(1, 1000)
BEGIN;
INSERT INTO webhookd_receipts (source, request_id, resource, version, decision, duplicate_decision,
    ordering_decision, latest_version_at_decision, payload_sha256, first_seen, last_seen, attempts,
    deliveries, unrouted, routes, expires_at)
VALUES ('pgbench', :client_id || '-' || :n, :client_id || '-' || :r, '1', 'accepted', 'new', 'newer', '',
    'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', now(), now(), 1,
    '[{"delivery_id":"d","received_at":"2026-01-01T00:00:00Z","decision":"accepted"}]', false,
    '{"default":{"position":0,"state":"pending","attempts":0}}',
    now() + interval '168 hours')
ON CONFLICT (source, request_id) DO NOTHING;
INSERT INTO webhookd_latest (source, resource, version, ord, request_id, updated_at)
VALUES ('pgbench', :client_id || '-' || :r, '1', :n, :client_id || '-' || :n, now())
ON CONFLICT (source, resource) DO UPDATE SET version = excluded.version, ord = excluded.ord,
    request_id = excluded.request_id, updated_at = excluded.updated_at
WHERE excluded.ord > webhookd_latest.ord;
INSERT INTO webhookd_outbox (source, route, request_id, resource, version, content_type, headers, created_at, next_attempt_at)
VALUES ('pgbench', 'default', :client_id || '-' || :n, :client_id || '-' || :r, '1', 'application/json', 'null', now(), now());
END;
