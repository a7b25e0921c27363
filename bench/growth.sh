#!/usr/bin/env bash
# bench/growth.sh: intake as the tables grow (docs/performance.md, "Intake as the tables grow").
#
#   bench/growth.sh [-n RECEIPTS] [-i SECONDS] [--postgres DSN | --badger]
#                   [--ttl SECONDS] [--autovacuum on|off] [--random-ids]
#                   [--max-minutes M] [--workdir DIR]
#
# Builds webhookd into a work directory and runs one replica on a fresh
# PostgreSQL database (created, and dropped at the end), or with --badger
# on a fresh data directory, with one source that does not forward. wrk
# (-t2 -c64, 1024-byte JSON bodies from bench/webhook.lua, every request a
# new request ID) runs in intervals of SECONDS (30) until RECEIPTS
# (2,000,000) are accepted, then one more minute. Each interval prints
# accepted/s, wrk's p99, the CPU time webhookd and PostgreSQL spent per
# 1,000 receipts (PostgreSQL: the backends of webhookd's connections; what
# a receipt costs the cores, which the rate shows only on a machine of its
# own, as it moves with whatever else runs), the machine's load average,
# webhookd's RSS, and the receipts table's size, dead rows and when it was
# last analyzed (PostgreSQL), or the data directory's size (Badger). The
# last lines compare the minute after RECEIPTS with the first minute.
# --ttl sets the source's receipt_ttl (168h otherwise), so that receipts
# expire while the run goes on; the last lines then give the size's first,
# last and range over the intervals after two TTLs: a plateau, or growth.
# --autovacuum sets the cluster's autovacuum (ALTER SYSTEM,
# pg_reload_conf()) for the run and restores it on exit, even on Ctrl-C;
# without it, the cluster's settings are used as they are. --random-ids
# sends request IDs that begin with random hex digits, as UUIDs do, in
# place of IDs that sort close to the ones before them. Everything it
# starts is stopped by PID on exit. --max-minutes (60) bounds the run.
# BENCH_POSTGRES is --postgres's default; BENCH_GROWTH_PORT (18480) the
# first of the two ports it uses (webhookd, its admin API), BENCH_GROWTH_DB
# (webhookd_bench_growth) the database's name.
set -euo pipefail

TARGET=2000000
INTERVAL=30
PG_DSN=${BENCH_POSTGRES:-}
BADGER=
MAX_MINUTES=60
WORK=
TTL=
AUTOVACUUM=
MODE=accept
THREADS=2
CONNS=64
while [ $# -gt 0 ]; do
	case $1 in
	-n) TARGET=$2; shift 2 ;;
	-i) INTERVAL=$2; shift 2 ;;
	--postgres) PG_DSN=$2; shift 2 ;;
	--badger) BADGER=1; shift ;;
	--ttl) TTL=$2; shift 2 ;;
	--autovacuum) AUTOVACUUM=$2; shift 2 ;;
	--random-ids) MODE=random; shift ;;
	--max-minutes) MAX_MINUTES=$2; shift 2 ;;
	--workdir) WORK=$2; shift 2 ;;
	-h | --help) sed -n '2,32p' "$0"; exit 0 ;;
	*) echo "growth.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
	esac
done
if [ -z "$BADGER" ] && [ -z "$PG_DSN" ]; then
	echo "growth.sh: give --postgres DSN or --badger" >&2
	exit 2
fi
case $AUTOVACUUM in
'' | on | off) ;;
*) echo "growth.sh: --autovacuum takes on or off" >&2; exit 2 ;;
esac
if [ -n "$AUTOVACUUM" ] && [ -n "$BADGER" ]; then
	echo "growth.sh: --autovacuum is for --postgres" >&2
	exit 2
fi
if [ -n "$TTL" ] && ! [[ $TTL =~ ^[1-9][0-9]*$ ]]; then
	echo "growth.sh: --ttl takes a number of seconds" >&2
	exit 2
fi

HOST=127.0.0.1
HOOK_PORT=${BENCH_GROWTH_PORT:-18480}
ADMIN_PORT=$((HOOK_PORT + 1))
URL=http://$HOST:$HOOK_PORT/hooks/intake
METRICS_URL=http://$HOST:$ADMIN_PORT/metrics
DB=${BENCH_GROWTH_DB:-webhookd_bench_growth}

[ -z "$WORK" ] || WORK=$(realpath -m -- "$WORK")
cd "$(dirname "$0")/.."
[ -n "$WORK" ] || WORK=$(mktemp -d /tmp/webhookd-growth.XXXXXX)
mkdir -p "$WORK/bin"
. bench/lib.sh

PIDS=()
DROP_DB=
RESTORE_AUTOVACUUM=
cleanup() {
	trap '' INT TERM
	stop_pids
	[ -z "$DROP_DB" ] || psql -q "$PG_DSN" -c "DROP DATABASE IF EXISTS $DB" 2>/dev/null || true
	if [ -n "$RESTORE_AUTOVACUUM" ]; then
		if psql -q "$PG_DSN" -c "$RESTORE_AUTOVACUUM" -c "SELECT pg_reload_conf()" >/dev/null; then
			say "autovacuum restored: $RESTORE_AUTOVACUUM"
		else
			say "RESTORING AUTOVACUUM FAILED; run: $RESTORE_AUTOVACUUM; SELECT pg_reload_conf();" >&2
		fi
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v wrk >/dev/null || { say "growth.sh needs wrk (apt-get install wrk)" >&2; exit 1; }
ports_free "$HOST" "$HOOK_PORT" "$ADMIN_PORT"
say "building into $WORK/bin"
go build -o "$WORK/bin/webhookd" ./cmd/webhookd

CLK_TCK=$(getconf CLK_TCK)
pg_ticks() {
	[ -z "$BADGER" ] || { echo 0; return; }
	pg_db_ticks "$PG_BASE/$DB" "$DB"
}
accepted() {
	curl -sf --max-time 10 "$METRICS_URL" |
		awk 'index($0, "webhookd_deliveries_total{") == 1 && index($0, "decision=\"accepted\"") { sum += $NF } END { printf "%.0f", sum }'
}

if [ -n "$BADGER" ]; then
	STORAGE="data_dir: $WORK/data"
	rm -rf "$WORK/data"
else
	PG_BASE=${PG_DSN%/*}
	psql -q "$PG_DSN" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
	DROP_DB=1
	if [ -n "$AUTOVACUUM" ] && [ "$(psql -tAc 'SHOW autovacuum' "$PG_DSN")" != "$AUTOVACUUM" ]; then
		# Restored on exit as it was: a value ALTER SYSTEM had set is set
		# again; otherwise ALTER SYSTEM's entry goes, and the configuration
		# files' value comes back.
		IFS='|' read -r was from < <(psql -tAc "SELECT setting, coalesce(sourcefile, '') FROM pg_settings WHERE name = 'autovacuum'" "$PG_DSN")
		if [ "${from##*/}" = postgresql.auto.conf ]; then
			RESTORE_AUTOVACUUM="ALTER SYSTEM SET autovacuum = $was"
		else
			RESTORE_AUTOVACUUM="ALTER SYSTEM RESET autovacuum"
		fi
		psql -q "$PG_DSN" -c "ALTER SYSTEM SET autovacuum = $AUTOVACUUM" -c "SELECT pg_reload_conf()" >/dev/null
		# The postmaster rereads the files in its own time; a new session
		# shows when it has.
		for _ in $(seq 50); do [ "$(psql -tAc 'SHOW autovacuum' "$PG_DSN")" = "$AUTOVACUUM" ] && break; sleep 0.1; done
		AV_NOTE=" (set by --autovacuum; was $was, restored on exit)"
	fi
	STORAGE="storage: { backend: postgres, dsn: \"$PG_BASE/$DB\", pool_size: 16 }"
fi
cat >"$WORK/webhookd.yaml" <<EOF
# Written by bench/growth.sh.
listen: "$HOST:$HOOK_PORT"
$STORAGE
receipt_ttl: ${TTL:-604800}s
max_body: 1048576
shutdown_timeout: 5s
log: { level: warn, format: json }
admin:
  listen: "$HOST:$ADMIN_PORT"
  token: "growth-$RANDOM$RANDOM"
sources:
  - name: intake
    request_id: json:request_id
    delivery_id: header:X-Delivery-Id
    resource: json:data.id
    version: json:data.version
    version_format: integer
    fingerprint_exclude: [sent_at]
EOF
"$WORK/bin/webhookd" serve --config "$WORK/webhookd.yaml" >"$WORK/webhookd.log" 2>&1 &
HOOKD_PID=$! PIDS+=("$HOOKD_PID")
for _ in $(seq 100); do curl -sf --max-time 1 -o /dev/null "http://$HOST:$HOOK_PORT/readyz" && break; sleep 0.1; done

# size: what the interval's last column shows.
if [ -n "$BADGER" ]; then
	size_header="data dir MiB"
	size() { du -sm --exclude=ballast "$WORK/data" | cut -f1; }
else
	size_header="receipts MiB | receipts dead rows | receipts last analyzed"
	size() {
		psql -AtF ' | ' "$PG_BASE/$DB" -c "SELECT pg_total_relation_size('webhookd_receipts') / 1048576,
			n_dead_tup, coalesce(to_char(greatest(last_analyze, last_autoanalyze), 'HH24:MI:SS'), 'never')
			FROM pg_stat_user_tables WHERE relname = 'webhookd_receipts'"
	}
	say "postgres: $(psql -tAc 'SELECT version()' "$PG_DSN" | cut -d, -f1); autovacuum $(psql -tAc 'SHOW autovacuum' "$PG_DSN")${AV_NOTE:-}"
fi
say "machine: $(getconf _NPROCESSORS_ONLN) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); work dir $WORK; webhookd pid $HOOKD_PID"
say "target: $TARGET receipts, then one more minute; ${INTERVAL} s intervals of wrk -t$THREADS -c$CONNS --timeout 30s; receipt_ttl ${TTL:-604800} s; request IDs: $MODE"
echo
say "t s | receipts | accepted/s | wrk p99 ms | non-2xx | CPU ms/1k webhookd | CPU ms/1k PostgreSQL backends | load avg | RSS MiB | $size_header"

start=$(now) chunk=0 extra=0 total=$(accepted)
FIRST=() LAST=() FIRST_CPU=() LAST_CPU=() PLATEAU=()
while :; do
	chunk=$((chunk + 1))
	t0=$(now) a0=$total h0=$(cpu_ticks "$HOOKD_PID") p0=$(pg_ticks)
	# A prefix per interval: wrk numbers requests from 1 on each run.
	# In the background: a signal then stops the run at once, not at the
	# interval's end.
	wrk -t"$THREADS" -c"$CONNS" -d"${INTERVAL}s" --timeout 30s --latency -s bench/webhook.lua "$URL" -- "$MODE" "g$chunk" >"$WORK/wrk-$chunk.txt" &
	WRK_PID=$! PIDS+=("$WRK_PID")
	wait "$WRK_PID"
	PIDS=("$HOOKD_PID")
	t1=$(now) total=$(accepted) h1=$(cpu_ticks "$HOOKD_PID") p1=$(pg_ticks)
	read -r p99_us non2xx < <(awk '/^BENCH / { for (i = 2; i <= NF; i++) { split($i, kv, "="); w[kv[1]] = kv[2] } print w["p99_us"], w["non2xx3xx"] }' "$WORK/wrk-$chunk.txt")
	rate=$(calc "($total - $a0) / ($t1 - $t0)")
	n=$((total > a0 ? total - a0 : 1))
	hcpu=$(calc "($h1 - $h0) * 1e6 / $CLK_TCK / $n") pcpu=$(calc "($p1 - $p0) * 1e6 / $CLK_TCK / $n")
	cpu=$(calc "$hcpu + $pcpu")
	[ -z "$BADGER" ] || pcpu=-
	sized=$(size)
	say "$(calc "$t1 - $start") | $total | $rate | $(calc "$p99_us / 1000" 1) | $non2xx | $hcpu | $pcpu | $(cut -d' ' -f1 /proc/loadavg) | $(rss_mib "$HOOKD_PID") | $sized"
	# Expiry has run for a TTL once the receipts of the first TTL expire.
	if [ -n "$TTL" ] && [ "$(calc "$t0 - $start >= 2 * $TTL")" = 1 ]; then PLATEAU+=("${sized%% *}"); fi
	# The first minute, and the minute after the target.
	if [ "$(calc "$t0 - $start < 60")" = 1 ]; then FIRST+=("$rate") FIRST_CPU+=("$cpu"); fi
	if [ "$a0" -ge "$TARGET" ]; then
		LAST+=("$rate") LAST_CPU+=("$cpu")
		extra=$(calc "$extra + $t1 - $t0")
		[ "$(calc "$extra >= 60")" = 0 ] || break
	fi
	if [ "$(calc "$t1 - $start > $MAX_MINUTES * 60")" = 1 ]; then
		if [ "$total" -lt "$TARGET" ]; then
			say "stopped after $MAX_MINUTES minutes, short of the target"
		else
			say "stopped after $MAX_MINUTES minutes, before the minute after the target ended"
		fi
		break
	fi
done
mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.0f", NR ? s / NR : 0 }'; }
echo
if [ "${#LAST[@]}" -gt 0 ]; then
	first=$(mean "${FIRST[@]}") last=$(mean "${LAST[@]}")
	say "first minute: $first accepted/s; the minute after $TARGET receipts: $last accepted/s; ratio $(calc "$last / $first" 2)"
	first=$(mean "${FIRST_CPU[@]}") last=$(mean "${LAST_CPU[@]}")
	who="webhookd and PostgreSQL"
	[ -z "$BADGER" ] || who=webhookd
	say "CPU ms per 1,000 receipts, $who: first minute $first, the minute after $TARGET receipts $last; receipts per CPU second, ratio $(calc "$first / $last" 2)"
fi
if [ -n "$TTL" ]; then
	if [ "${#PLATEAU[@]}" -gt 0 ]; then
		what="receipts table"
		[ -z "$BADGER" ] || what="data dir"
		say "with receipt_ttl $TTL s, the ${#PLATEAU[@]} intervals after $((2 * TTL)) s (receipts expiring): $what first ${PLATEAU[0]} MiB, last ${PLATEAU[-1]} MiB," \
			"range $(printf '%s\n' "${PLATEAU[@]}" | sort -n | head -1)–$(printf '%s\n' "${PLATEAU[@]}" | sort -n | tail -1) MiB (a plateau when last stays near first)"
	else
		say "with receipt_ttl $TTL s: no interval started after $((2 * TTL)) s; run longer (-n) or with a shorter --ttl"
	fi
fi
say "webhookd log lines at warn or above: $(grep -c '"level":"\(warn\|error\)"' "$WORK/webhookd.log" || true) ($WORK/webhookd.log)"
say "work dir kept for inspection: $WORK"
