#!/usr/bin/env bash
# bench/backlog.sh: a backlog of a million, then its drain (docs/performance.md, "Running the load benchmark").
#
#   bench/backlog.sh [-n ENTRIES] [-i SECONDS] [--postgres DSN | --badger]
#                    [--drain SECONDS] [--max-minutes M] [--workdir DIR]
#
# Builds webhookd and bench/downstream into a work directory and runs one
# replica on a fresh PostgreSQL database (created, and dropped at the end),
# or with --badger on a fresh data directory, with one source forwarding on
# one route to the downstream, which checks per-resource order. The route is
# paused through the admin API before intake starts, as when a downstream is
# down for hours. wrk (-t2 -c64, 1024-byte JSON bodies from
# bench/webhook.lua's backlog mode: new request IDs, 2,000 resources,
# versions growing per resource) runs in intervals of SECONDS (30) until
# ENTRIES (1,000,000) wait in the outbox. Each interval prints accepted/s,
# wrk's p99, webhookd's RSS and its anonymous part, the outbox's pending
# entries, the data's size (the data directory, or the receipts, payloads
# and outbox tables) and how long one GET /metrics and one GET /admin/routes
# took. Then the route is resumed and the drain is timed until the outbox is
# empty, or for --drain SECONDS (1800) at most, printing forwards/s and RSS
# every interval, and the CPU of webhookd, the downstream and PostgreSQL
# (the backends of webhookd's connections) over the drain. The last lines
# compare the fill's first and last intervals, and the drain's rate with the
# fill's; the run fails if the downstream saw a resource's version go down,
# if fewer distinct Idempotency-Keys arrived than were accepted, or if the
# outbox did not drain. Everything it starts is stopped by PID on exit.
# --max-minutes (60) bounds the fill. BENCH_POSTGRES is --postgres's
# default; BENCH_BACKLOG_PORT (18580) the first of the three ports it uses
# (webhookd, its admin API, the downstream), BENCH_BACKLOG_DB
# (webhookd_bench_backlog) the database's name.
set -euo pipefail

TARGET=1000000
INTERVAL=30
DRAIN_TIMEOUT=1800
PG_DSN=${BENCH_POSTGRES:-}
BADGER=
MAX_MINUTES=60
WORK=
THREADS=2
CONNS=64
while [ $# -gt 0 ]; do
	case $1 in
	-n) TARGET=$2; shift 2 ;;
	-i) INTERVAL=$2; shift 2 ;;
	--postgres) PG_DSN=$2; shift 2 ;;
	--badger) BADGER=1; shift ;;
	--drain) DRAIN_TIMEOUT=$2; shift 2 ;;
	--max-minutes) MAX_MINUTES=$2; shift 2 ;;
	--workdir) WORK=$2; shift 2 ;;
	-h | --help) sed -n '2,30p' "$0"; exit 0 ;;
	*) echo "backlog.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
	esac
done
if [ -z "$BADGER" ] && [ -z "$PG_DSN" ]; then
	echo "backlog.sh: give --postgres DSN or --badger" >&2
	exit 2
fi

HOST=127.0.0.1
PORT=${BENCH_BACKLOG_PORT:-18580}
HOOK_PORT=$PORT ADMIN_PORT=$((PORT + 1)) DOWN_PORT=$((PORT + 2))
URL=http://$HOST:$HOOK_PORT/hooks/bench
ADMIN_URL=http://$HOST:$ADMIN_PORT
COUNT_URL=http://$HOST:$DOWN_PORT/count
DB=${BENCH_BACKLOG_DB:-webhookd_bench_backlog}
ADMIN_TOKEN=backlog-$RANDOM$RANDOM

[ -z "$WORK" ] || WORK=$(realpath -m -- "$WORK")
cd "$(dirname "$0")/.."
[ -n "$WORK" ] || WORK=$(mktemp -d /tmp/webhookd-backlog.XXXXXX)
mkdir -p "$WORK/bin"
. bench/lib.sh

PIDS=()
DROP_DB=
cleanup() {
	trap '' INT TERM
	stop_pids
	[ -z "$DROP_DB" ] || psql -q "$PG_DSN" -c "DROP DATABASE IF EXISTS $DB" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v wrk >/dev/null || { say "backlog.sh needs wrk (apt-get install wrk)" >&2; exit 1; }
ports_free "$HOST" "$HOOK_PORT" "$ADMIN_PORT" "$DOWN_PORT"
say "building into $WORK/bin"
go build -o "$WORK/bin/webhookd" ./cmd/webhookd
go build -o "$WORK/bin/downstream" ./bench/downstream

CLK_TCK=$(getconf CLK_TCK)
admin() { # METHOD PATH: one admin call; its body on stdout
	curl -sf --max-time 30 -X "$1" -H "Authorization: Bearer $ADMIN_TOKEN" "$ADMIN_URL$2"
}
# scrape: one GET /metrics into metrics.txt, its time in ms into SCRAPE_MS
# (the cost of reading pending as the backlog grows). Not in $(...).
scrape() {
	SCRAPE_MS=$(curl -sf --max-time 60 -o "$WORK/metrics.txt" -w '%{time_total}' "$ADMIN_URL/metrics" | awk '{ printf "%.1f", $1 * 1000 }')
}
# metric NAME [LABEL-SUBSTRING]: the sum of the matching series in the last scrape.
metric() {
	awk -v name="$1" -v label="${2:-}" '
		index($0, name) == 1 && (substr($0, length(name) + 1, 1) ~ /[{ ]/) && index($0, label) { sum += $NF }
		END { printf "%.0f", sum }' "$WORK/metrics.txt"
}
accepted() { metric webhookd_deliveries_total 'decision="accepted"'; }
delivered() { metric webhookd_forward_attempts_total 'result="delivered"'; }
pending() { metric webhookd_outbox_pending 'source="bench"'; }
# admin_ms: the time of one GET /admin/routes, which claims nothing.
admin_ms() { curl -sf --max-time 60 -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $ADMIN_TOKEN" "$ADMIN_URL/admin/routes" | awk '{ printf "%.1f", $1 * 1000 }'; }

if [ -n "$BADGER" ]; then
	STORAGE="data_dir: $WORK/data"
	rm -rf "$WORK/data"
else
	PG_BASE=${PG_DSN%/*}
	psql -q "$PG_DSN" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
	DROP_DB=1
	STORAGE="storage: { backend: postgres, dsn: \"$PG_BASE/$DB\", pool_size: 16 }"
fi
cat >"$WORK/webhookd.yaml" <<EOF
# Written by bench/backlog.sh.
listen: "$HOST:$HOOK_PORT"
$STORAGE
receipt_ttl: 168h
max_body: 1048576
shutdown_timeout: 5s
log: { level: warn, format: json }
admin:
  listen: "$HOST:$ADMIN_PORT"
  token: "$ADMIN_TOKEN"
sources:
  - name: bench
    request_id: json:request_id
    delivery_id: header:X-Delivery-Id
    resource: json:data.id
    version: json:data.version
    version_format: integer
    fingerprint_exclude: [sent_at]
    routes:
      - name: down
        url: http://$HOST:$DOWN_PORT/backlog
        timeout: 60s
        concurrency: 64
        max_attempts: 12
        backoff: { initial: 1s, max: 1m }
EOF
"$WORK/bin/downstream" -listen "$HOST:$DOWN_PORT" -order >"$WORK/downstream.log" 2>&1 &
DOWN_PID=$! PIDS+=("$DOWN_PID")
"$WORK/bin/webhookd" serve --config "$WORK/webhookd.yaml" >"$WORK/webhookd.log" 2>&1 &
HOOKD_PID=$! PIDS+=("$HOOKD_PID")
for url in "http://$HOST:$HOOK_PORT/readyz" "$COUNT_URL"; do
	for _ in $(seq 100); do curl -sf --max-time 1 -o /dev/null "$url" && break; sleep 0.1; done
	curl -sf --max-time 1 -o /dev/null "$url" || { say "$url did not come up" >&2; exit 1; }
done
admin POST /admin/routes/bench/down/pause | grep -q '"paused":true' || { say "pausing the route failed" >&2; exit 1; }

# size: what the interval's last columns show.
if [ -n "$BADGER" ]; then
	size_header="data dir MiB"
	size() { du -sm --exclude=ballast "$WORK/data" | cut -f1; }
	pg_ticks() { echo 0; }
else
	size_header="receipts MiB | payloads MiB | outbox MiB"
	size() {
		psql -AtF ' | ' "$PG_BASE/$DB" -c "SELECT pg_total_relation_size('webhookd_receipts') / 1048576,
			pg_total_relation_size('webhookd_payloads') / 1048576, pg_total_relation_size('webhookd_outbox') / 1048576"
	}
	pg_ticks() { pg_db_ticks "$PG_BASE/$DB" "$DB"; }
	say "postgres: $(psql -tAc 'SELECT version()' "$PG_DSN" | cut -d, -f1); autovacuum $(psql -tAc 'SHOW autovacuum' "$PG_DSN")"
fi
say "machine: $(getconf _NPROCESSORS_ONLN) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); work dir $WORK; webhookd pid $HOOKD_PID, downstream pid $DOWN_PID"
say "fill: route bench/down paused; ${INTERVAL} s intervals of wrk -t$THREADS -c$CONNS --timeout 30s until $TARGET entries wait"
echo
say "t s | pending | accepted/s | wrk p99 ms | non-2xx | RSS MiB | RssAnon MiB | GET /metrics ms | GET /admin/routes ms | $size_header"

start=$(now) chunk=0 pending=0
scrape
total=$(accepted)
RATES=() LOADED=0 # LOADED: the seconds wrk ran, without the measurements between runs
while [ "$pending" -lt "$TARGET" ]; do
	chunk=$((chunk + 1))
	t0=$(now) a0=$total
	# The interval's number makes the request IDs new and the versions
	# higher than the last interval's, on the same 2,000 resources. In the
	# background: a signal then stops the run at once.
	wrk -t"$THREADS" -c"$CONNS" -d"${INTERVAL}s" --timeout 30s --latency -s bench/webhook.lua "$URL" -- backlog "$chunk" >"$WORK/wrk-$chunk.txt" &
	WRK_PID=$! PIDS+=("$WRK_PID")
	wait "$WRK_PID"
	PIDS=("$DOWN_PID" "$HOOKD_PID")
	t1=$(now)
	scrape
	total=$(accepted) pending=$(pending)
	read -r p99_us non2xx < <(awk '/^BENCH / { for (i = 2; i <= NF; i++) { split($i, kv, "="); w[kv[1]] = kv[2] } print w["p99_us"], w["non2xx3xx"] }' "$WORK/wrk-$chunk.txt")
	rate=$(calc "($total - $a0) / ($t1 - $t0)")
	RATES+=("$rate") LOADED=$(calc "$LOADED + $t1 - $t0" 3)
	say "$(calc "$t1 - $start") | $pending | $rate | $(calc "$p99_us / 1000" 1) | $non2xx | $(rss_mib "$HOOKD_PID") | $(anon_mib "$HOOKD_PID") | $SCRAPE_MS | $(admin_ms) | $(size)"
	if [ "$(calc "$t1 - $start > $MAX_MINUTES * 60")" = 1 ]; then
		say "stopped after $MAX_MINUTES minutes, short of the target"
		break
	fi
done
FILL_RATE=$(calc "$total / $LOADED")

echo
say "drain: route bench/down resumed with $pending entries pending; up to $DRAIN_TIMEOUT s, a line every $INTERVAL s"
say "t s | pending | forwards/s | RSS MiB | RssAnon MiB | GET /metrics ms | GET /admin/routes ms"
scrape
f0=$(delivered) h0=$(cpu_ticks "$HOOKD_PID") d0=$(cpu_ticks "$DOWN_PID") p0=$(pg_ticks) t0=$(now)
admin POST /admin/routes/bench/down/resume >/dev/null
last_t=$t0 last_f=$f0
while :; do
	sleep 1
	scrape
	pending=$(pending) t=$(now)
	[ "$pending" -gt 0 ] || break
	[ "$(calc "$t - $t0 < $DRAIN_TIMEOUT")" = 1 ] || break
	if [ "$(calc "$t - $last_t >= $INTERVAL")" = 1 ]; then
		f=$(delivered)
		say "$(calc "$t - $t0") | $pending | $(calc "($f - $last_f) / ($t - $last_t)") | $(rss_mib "$HOOKD_PID") | $(anon_mib "$HOOKD_PID") | $SCRAPE_MS | $(admin_ms)"
		last_t=$t last_f=$f
	fi
done
f1=$(delivered) h1=$(cpu_ticks "$HOOKD_PID") d1=$(cpu_ticks "$DOWN_PID") p1=$(pg_ticks)
wall=$(calc "$t - $t0" 3)
DRAIN_RATE=$(calc "($f1 - $f0) / $wall")
pcpu=$(calc "($p1 - $p0) * 100 / $CLK_TCK / $wall")
[ -z "$BADGER" ] || pcpu=-
say "$(calc "$wall") | $pending | $(calc "($f1 - $last_f) / ($t - $last_t)") | $(rss_mib "$HOOKD_PID") | $(anon_mib "$HOOKD_PID") | $SCRAPE_MS | $(admin_ms)"

echo
say "fill: $total accepted in $(calc "$LOADED") s of wrk, $FILL_RATE accepted/s; first interval ${RATES[0]}/s, last ${RATES[-1]}/s; last / first $(calc "${RATES[-1]} / ${RATES[0]}" 2) (should hold near 1)"
say "drain: $((f1 - f0)) forwarded in $(calc "$wall" 1) s, $DRAIN_RATE forwards/s; drain / fill $(calc "$DRAIN_RATE / $FILL_RATE" 2) (should be at least 1); outbox pending now $pending"
say "drain CPU, % of one core: webhookd $(calc "($h1 - $h0) * 100 / $CLK_TCK / $wall"), downstream $(calc "($d1 - $d0) * 100 / $CLK_TCK / $wall"), PostgreSQL backends $pcpu"
count=$(curl -sf --max-time 10 "$COUNT_URL")
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" <<<"$count"; }
keys=$(field distinct_keys) out_of_order=$(field out_of_order)
say "downstream: $(field requests) requests, $keys distinct Idempotency-Keys of $total accepted, $out_of_order out of order, $(field repeats) repeats"
say "webhookd log lines at warn or above: $(grep -c '"level":"\(warn\|error\)"' "$WORK/webhookd.log" || true) ($WORK/webhookd.log)"
say "work dir kept for inspection: $WORK"
failed=
[ "$out_of_order" = 0 ] || { say "FAILED: $out_of_order deliveries arrived with a version lower than one already received" >&2; failed=1; }
[ "$keys" -ge "$total" ] || { say "FAILED: $((total - keys)) accepted entries have not reached the downstream" >&2; failed=1; }
[ "$pending" = 0 ] || { say "FAILED: the outbox did not drain within $DRAIN_TIMEOUT s" >&2; failed=1; }
[ -z "$failed" ] || exit 1
