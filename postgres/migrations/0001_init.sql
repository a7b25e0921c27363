-- Receipts: one per (source, request_id), the evidence of its decision. A
-- row whose expires_at has passed is treated as absent, and the expiry job
-- deletes it.
CREATE TABLE webhookd_receipts (
    source                     text        NOT NULL,
    request_id                 text        NOT NULL,
    resource                   text        NOT NULL,
    version                    text        NOT NULL,
    decision                   text        NOT NULL,
    duplicate_decision         text        NOT NULL,
    ordering_decision          text        NOT NULL,
    latest_version_at_decision text        NOT NULL,
    payload_sha256             text        NOT NULL,
    first_seen                 timestamptz NOT NULL,
    last_seen                  timestamptz NOT NULL,
    attempts                   integer     NOT NULL,
    deliveries                 jsonb       NOT NULL,
    -- Set when the source has routes and the accepted delivery matched
    -- none of their filters.
    unrouted                   boolean     NOT NULL,
    -- The forward status of each route the request was forwarded to, an
    -- object keyed by route name: {"position", "state", "attempts",
    -- "last_status", "last_error", "next_attempt_at", "delivered_at",
    -- "token"}. position is the route's place in the source's route
    -- order; token is the lease token of the claim whose settle wrote the
    -- status, so that settling that claim again is known to be a repeat.
    -- The statuses live in the receipt's row so that a receipt and its
    -- statuses are written, replaced and expired as one row.
    routes                     jsonb       NOT NULL,
    expires_at                 timestamptz NOT NULL,
    PRIMARY KEY (source, request_id)
);
CREATE INDEX webhookd_receipts_expires_at ON webhookd_receipts (expires_at);
-- Receipt search walks one of these newest first, from a keyset cursor:
-- every receipt, or one source's.
CREATE INDEX webhookd_receipts_seen ON webhookd_receipts (first_seen, source, request_id);
CREATE INDEX webhookd_receipts_source_seen ON webhookd_receipts (source, first_seen, request_id);

-- Latest accepted version of each resource; never expires. ord is the
-- version's unsigned 64-bit order with its top bit flipped, so that bigint
-- order is the unsigned order.
CREATE TABLE webhookd_latest (
    source     text        NOT NULL,
    resource   text        NOT NULL,
    version    text        NOT NULL,
    ord        bigint      NOT NULL,
    request_id text        NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (source, resource)
);

-- The payload of each accepted delivery of a forwarding source, with its
-- body, for forwarding and redelivery: one per request, whatever the
-- number of routes whose entries send it. A payload belongs to the
-- receipt first seen at created_at.
CREATE TABLE webhookd_payloads (
    source       text        NOT NULL,
    request_id   text        NOT NULL,
    resource     text        NOT NULL,
    version      text        NOT NULL,
    content_type text        NOT NULL,
    headers      jsonb       NOT NULL,
    -- The W3C traceparent of the span that accepted the request, '' when
    -- tracing was off; the entries' and dead letters' trace is a copy.
    trace        text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL,
    body         bytea       NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (source, request_id)
);
CREATE INDEX webhookd_payloads_expires_at ON webhookd_payloads (expires_at);

-- Outbox: entries waiting to be forwarded, one for each route an accepted
-- delivery matched; the routes' entries of one request share its payload.
-- Entries of one (source, route, resource) are a lane in seq order; an
-- entry without a resource ('') is a lane of its own. A claim sets the lease columns; lease_token stays after
-- a settle that reschedules, so that settling that claim again is known to
-- be a repeat.
CREATE TABLE webhookd_outbox (
    seq             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source          text        NOT NULL,
    route           text        NOT NULL,
    request_id      text        NOT NULL,
    resource        text        NOT NULL,
    version         text        NOT NULL,
    content_type    text        NOT NULL,
    headers         jsonb       NOT NULL,
    trace           text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_status     integer     NOT NULL DEFAULT 0,
    last_error      text        NOT NULL DEFAULT '',
    lease_owner     text,
    lease_token     bigint,
    lease_until     timestamptz,
    -- False while the entry has an earlier entry in its lane, which
    -- insertOutbox sees and webhookd_outbox_promote turns true once the
    -- earlier entries went; true may also mean "maybe", which the claim
    -- checks. The due index holds heads only, so that a claim walks no
    -- entry waiting behind one, however many wait.
    head            boolean     NOT NULL DEFAULT true
-- A claim sets the lease columns only, which no index holds: the room a
-- page keeps takes the new versions of its rows, so that a claim writes
-- no index entry (a HOT update), and a VACUUM or the next read of the
-- page gives the room back.
) WITH (fillfactor = 70);
CREATE INDEX webhookd_outbox_due ON webhookd_outbox (source, route, next_attempt_at, seq) WHERE head;
CREATE INDEX webhookd_outbox_lane ON webhookd_outbox (source, route, resource, seq);

CREATE SEQUENCE webhookd_lease_tokens;

-- Dead letters: entries that will not be forwarded again unless retried,
-- one per (source, route, request_id), with their own copy of the body
-- (NULL when it expired before it could be sent).
CREATE TABLE webhookd_dead_letters (
    source          text        NOT NULL,
    route           text        NOT NULL,
    request_id      text        NOT NULL,
    resource        text        NOT NULL,
    version         text        NOT NULL,
    content_type    text        NOT NULL,
    headers         jsonb       NOT NULL,
    trace           text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    attempts        integer     NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    last_status     integer     NOT NULL,
    last_error      text        NOT NULL,
    dead_at         timestamptz NOT NULL,
    body            bytea,
    -- The lease token of the claim that buried it, as in webhookd_receipts.
    token           bigint,
    PRIMARY KEY (source, route, request_id)
);
-- Bulk retry and discard take dead letters oldest accepted first.
CREATE INDEX webhookd_dead_letters_created ON webhookd_dead_letters (created_at, source, route, request_id);

-- The state of each route's sends (forward.RouteState), shared by every
-- replica: its pause, its breaker and its rate budget. A route without a
-- row is closed, not paused, with a full bucket; a zero time is NULL.
CREATE TABLE webhookd_routes (
    source      text             NOT NULL,
    route       text             NOT NULL,
    paused      boolean          NOT NULL DEFAULT false,
    circuit     text             NOT NULL DEFAULT '',
    failures    integer          NOT NULL DEFAULT 0,
    opens       integer          NOT NULL DEFAULT 0,
    open_until  timestamptz,
    probe       text             NOT NULL DEFAULT '',
    probe_until timestamptz,
    tokens      double precision NOT NULL DEFAULT 0,
    tokens_at   timestamptz,
    PRIMARY KEY (source, route)
);

-- How many outbox entries ('outbox') and dead letters ('dead') each target
-- has, as rows of changes that add up to the counts. Triggers on the two
-- tables insert a row for each target a statement changed, so that every
-- write path counts and concurrent writers never contend on one row; the
-- store folds the rows into one a target now and then (foldCounts).
CREATE TABLE webhookd_counts (
    kind   text   NOT NULL,
    source text   NOT NULL,
    route  text   NOT NULL,
    n      bigint NOT NULL
);

-- TG_ARGV[0] is the kind; the transition table is the rows a statement
-- inserted (added) or deleted (removed); a TRUNCATE empties the kind.
-- search_path is the migration's, so that a statement run with another
-- one (an operator's) finds the table too.
CREATE FUNCTION webhookd_count_added() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO webhookd_counts (kind, source, route, n)
    SELECT TG_ARGV[0], source, route, count(*) FROM added GROUP BY source, route;
    RETURN NULL;
END $$;

CREATE FUNCTION webhookd_count_removed() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO webhookd_counts (kind, source, route, n)
    SELECT TG_ARGV[0], source, route, -count(*) FROM removed GROUP BY source, route;
    RETURN NULL;
END $$;

CREATE FUNCTION webhookd_count_truncated() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM webhookd_counts WHERE kind = TG_ARGV[0];
    RETURN NULL;
END $$;

-- Entries and dead letters never change target: an UPDATE leaves the
-- counts as they are.
CREATE TRIGGER webhookd_outbox_added AFTER INSERT ON webhookd_outbox
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION webhookd_count_added('outbox');
CREATE TRIGGER webhookd_outbox_removed AFTER DELETE ON webhookd_outbox
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION webhookd_count_removed('outbox');
CREATE TRIGGER webhookd_dead_letters_added AFTER INSERT ON webhookd_dead_letters
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION webhookd_count_added('dead');
CREATE TRIGGER webhookd_dead_letters_removed AFTER DELETE ON webhookd_dead_letters
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION webhookd_count_removed('dead');
CREATE TRIGGER webhookd_outbox_truncated AFTER TRUNCATE ON webhookd_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION webhookd_count_truncated('outbox');
CREATE TRIGGER webhookd_dead_letters_truncated AFTER TRUNCATE ON webhookd_dead_letters
    FOR EACH STATEMENT EXECUTE FUNCTION webhookd_count_truncated('dead');

-- A lane's first entry becomes its head when the entries before it are
-- deleted (delivered, superseded, buried, discarded). An entry inserted
-- behind one holds a FOR KEY SHARE lock on it until its insert commits,
-- so a DELETE of that entry waits, and this statement, planned after it,
-- sees the new one: no lane is left without a head. One probe of the lane
-- index a lane the statement touched.
CREATE FUNCTION webhookd_outbox_promote() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE webhookd_outbox o SET head = true
    FROM (SELECT DISTINCT source, route, resource FROM removed WHERE resource <> '') l,
        LATERAL (SELECT p.seq FROM webhookd_outbox p
            WHERE p.source = l.source AND p.route = l.route AND p.resource = l.resource
            ORDER BY p.seq LIMIT 1) first
    WHERE o.seq = first.seq AND NOT o.head;
    RETURN NULL;
END $$;
CREATE TRIGGER webhookd_outbox_promote AFTER DELETE ON webhookd_outbox
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION webhookd_outbox_promote();
