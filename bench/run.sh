#!/usr/bin/env bash
# bench/run.sh: one-command load benchmark of webhookd (docs/performance.md, "Running the load benchmark").
#
#   bench/run.sh [-d SECONDS] [--soak MINUTES] [--soak-rate PER_SECOND]
#                [--drain SECONDS] [--workdir DIR] [--memory-limit BYTES]
#                [--postgres DSN]
#
# Builds webhookd and the helpers (bench/ceiling, bench/downstream,
# bench/loadgen) into a work directory, starts them on 127.0.0.1 only, runs
# bounded wrk phases (-t2 -c64 -d SECONDS, 1024-byte JSON bodies from
# bench/webhook.lua): the ceiling, intake alone, accepts with forwarding,
# accepts with forwarding to three routes (fanout), duplicates, mixed with stale versions, and a backlog built while the
# downstream holds requests; then it releases the downstream, times the
# outbox draining (forwarding alone) and prints a table. With --memory-limit,
# webhookd runs in a memory cgroup of that size, as in a container (root).
# Everything it starts is stopped by PID on exit. Environment variables
# BENCH_DURATION, BENCH_SOAK_MINUTES, BENCH_SOAK_RATE (0: half the accept
# phase's rate), BENCH_DRAIN_TIMEOUT, BENCH_WORKDIR and BENCH_MEMORY_LIMIT
# are the flags' defaults; BENCH_FORWARD_CONCURRENCY (64)
# sets every route's concurrency.
#
# With --postgres postgres://USER@HOST:PORT/DB (BENCH_POSTGRES), a DSN
# whose user may create databases, it then runs the postgres backend in
# databases of its own (created, and dropped at the end): pgbench with
# bench/pgbench.sql, the database's ceiling for the statements a decision
# writes; one webhookd replica on intake alone; one replica, then three
# on one database, each with its own wrk and a third of the connections,
# on accepts with forwarding (one replica also to three routes), then the
# drain, as above.
set -euo pipefail

DURATION=${BENCH_DURATION:-20}
SOAK_MIN=${BENCH_SOAK_MINUTES:-0}
SOAK_RATE=${BENCH_SOAK_RATE:-0}
DRAIN_TIMEOUT=${BENCH_DRAIN_TIMEOUT:-120}
FORWARD_CONCURRENCY=${BENCH_FORWARD_CONCURRENCY:-64}
WORK=${BENCH_WORKDIR:-}
MEMORY_LIMIT=${BENCH_MEMORY_LIMIT:-}
PG_DSN=${BENCH_POSTGRES:-}
THREADS=2
CONNS=64
while [ $# -gt 0 ]; do
	case $1 in
	-d | --duration) DURATION=$2; shift 2 ;;
	--soak) SOAK_MIN=$2; shift 2 ;;
	--soak-rate) SOAK_RATE=$2; shift 2 ;;
	--drain) DRAIN_TIMEOUT=$2; shift 2 ;;
	--workdir) WORK=$2; shift 2 ;;
	--memory-limit) MEMORY_LIMIT=$2; shift 2 ;;
	--postgres) PG_DSN=$2; shift 2 ;;
	-h | --help) sed -n '2,29p' "$0"; exit 0 ;;
	*) echo "run.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
	esac
done

# Loopback only, fixed ports; a port already in use aborts the run.
HOST=127.0.0.1
HOOK_PORT=18080 ADMIN_PORT=18081 CEILING_PORT=18090 DOWN_PORT=18099
HOOK_URL=http://$HOST:$HOOK_PORT/hooks/bench
INTAKE_URL=http://$HOST:$HOOK_PORT/hooks/intake
FANOUT_URL=http://$HOST:$HOOK_PORT/hooks/fanout
CEILING_URL=http://$HOST:$CEILING_PORT/hooks/bench
METRICS_URL=http://$HOST:$ADMIN_PORT/metrics
COUNT_URL=http://$HOST:$DOWN_PORT/count

# A relative --workdir is the caller's, not the repository's: resolved
# before the cd below.
[ -z "$WORK" ] || WORK=$(realpath -m -- "$WORK")
cd "$(dirname "$0")/.."
[ -n "$WORK" ] || WORK=$(mktemp -d /tmp/webhookd-bench.XXXXXX)
mkdir -p "$WORK/bin"
. bench/lib.sh
section() { printf '\n== %s\n' "$*"; }

PIDS=()
CGROUP=
cleanup() {
	trap '' INT TERM # a second Ctrl-C must not cut the cleanup short
	stop_pids
	[ -z "$CGROUP" ] || rmdir "$CGROUP" 2>/dev/null || true
	for db in "${PG_DBS[@]}"; do psql -q "$PG_DSN" -c "DROP DATABASE IF EXISTS $db" 2>/dev/null || true; done
}
PG_DBS=()
trap cleanup EXIT
trap 'exit 130' INT TERM
# forget PID: it has been waited for, so cleanup must not signal a number
# the kernel may have given to another process since.
forget() {
	local keep=() p
	for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	PIDS=("${keep[@]}")
}

# --- tools and builds --------------------------------------------------------
if ! command -v wrk >/dev/null; then
	say "installing wrk (apt-get)"
	apt-get update -qq && apt-get install -y -qq wrk >/dev/null
fi
say "building into $WORK/bin"
go build -o "$WORK/bin/webhookd" ./cmd/webhookd
go build -o "$WORK/bin/ceiling" ./bench/ceiling
go build -o "$WORK/bin/downstream" ./bench/downstream
go build -o "$WORK/bin/loadgen" ./bench/loadgen

PG_PORTS=(18180 18280 18380) # the postgres replicas' public ports; admin on the next
for port in $HOOK_PORT $ADMIN_PORT $CEILING_PORT $DOWN_PORT ${PG_DSN:+${PG_PORTS[@]} 18181 18281 18381}; do
	if (exec 3<>"/dev/tcp/$HOST/$port") 2>/dev/null; then
		say "port $HOST:$port is in use; stop what holds it first" >&2
		exit 1
	fi
done

# --- helpers -----------------------------------------------------------------
CLK_TCK=$(getconf CLK_TCK)
NCPU=$(getconf _NPROCESSORS_ONLN) # what /proc/stat counts, whatever this shell's affinity
sys_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $5 + $6, $9 }' /proc/stat; } # all, idle + iowait, steal
# children_cpu sets CHILD_CPU to the CPU seconds of this shell's finished
# children (in a phase: wrk). Not in $(...): that would time a subshell.
children_cpu() {
	times >"$WORK/times"
	CHILD_CPU=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$WORK/times")
}
written() { awk '/^write_bytes:/ { print $2 }' "/proc/$1/io"; } # bytes the process had written to disk
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
rss_detail() { awk '/^(VmRSS|RssAnon|RssFile):/ { printf "%s %.0f MiB ", $1, $2 / 1024 }' "/proc/$1/status"; }
# Allocated blocks, not apparent size; the free-space ballast is not data.
disk_bytes() { du -sk --exclude=ballast "$1" | awk '{ printf "%.0f", $1 * 1024 }'; }
wait_up() {                                               # URL
	for _ in $(seq 100); do curl -s --max-time 1 -o /dev/null "$1" && return 0; sleep 0.1; done
	say "$1 did not come up" >&2
	exit 1
}
# metric NAME [LABEL-SUBSTRING]: the sum of the matching series in one scrape.
scrape() { curl -sf --max-time 10 "$METRICS_URL" >"$WORK/metrics.txt"; }
metric() {
	awk -v name="$1" -v label="${2:-}" '
		index($0, name) == 1 && (substr($0, length(name) + 1, 1) ~ /[{ ]/) && index($0, label) { sum += $NF }
		END { printf "%.0f", sum }' "$WORK/metrics.txt"
}
# ends KB...: the means of the first and the last six samples (a minute),
# in MiB, and the change between them.
ends() {
	printf '%s\n' "$@" | awk '{ v[NR] = $1 } END {
		k = NR >= 12 ? 6 : int(NR / 2)
		for (i = 1; i <= k; i++) { a += v[i]; b += v[NR - k + i] }
		printf "%.0f -> %.0f MiB (%+.1f %%)", a / k / 1024, b / k / 1024, (b - a) * 100 / a }'
}
# server_buckets SOURCE: SOURCE's intake-duration histogram in the last
# scrape, one "le count" line per bucket.
server_buckets() {
	awk -v src="source=\"$1\"" 'index($0, "webhookd_intake_duration_seconds_bucket{") == 1 && index($0, src) {
		match($0, /le="[^"]*"/); print substr($0, RSTART + 4, RLENGTH - 5), $NF }' "$WORK/metrics.txt"
}
# server_p99 BEFORE AFTER: the upper bound in ms of the bucket that holds the
# 99th percentile of the requests counted between two server_buckets files.
server_p99() {
	awk 'FILENAME == ARGV[1] { before[$1] = $2; next } { le[FNR] = $1; n[FNR] = $2 - before[$1] } END {
		for (i = 1; i <= FNR; i++) if (n[i] >= 0.99 * n[FNR]) { print le[i] == "+Inf" ? "inf" : le[i] * 1000; exit } }' "$1" "$2"
}
decided() { metric webhookd_deliveries_total "decision=\"$1\""; }
delivered() { metric webhookd_forward_attempts_total 'result="delivered"'; }
counters() { # accepted duplicate stale conflict rejected delivered retry dead
	scrape
	echo "$(decided accepted) $(decided duplicate) $(decided stale) $(decided conflict)" \
		"$(metric webhookd_rejections_total) $(delivered)" \
		"$(metric webhookd_forward_attempts_total 'result="retry"') $(metric webhookd_forward_attempts_total 'result="dead"')"
}

# --- phases ------------------------------------------------------------------
ROWS=()
CEILING_RPS=0
DOWN_PID=
declare -A SENT # per-thread requests sent by the accept phase, for the dup phase

# phase NAME PID URL WRK-ARGS...: one bounded wrk run against URL, PID being
# the server measured; appends a row to ROWS.
phase() {
	local name=$1 pid=$2 url=$3
	shift 3
	local out=$WORK/wrk-$name.txt before=() after=()
	local t0 t1 c0 c1 d0=0 d1=0 s0 s1 w0 w1 io0 io1 # wall clock; CPU of server, downstream, machine, wrk; server's disk writes
	if [ "$name" != ceiling ]; then
		read -ra before <<<"$(counters)"
		server_buckets "${url##*/}" >"$WORK/buckets-before"
	fi
	children_cpu
	w0=$CHILD_CPU c0=$(cpu_ticks "$pid") s0=$(sys_ticks) io0=$(written "$pid") t0=$(now)
	[ -z "$DOWN_PID" ] || d0=$(cpu_ticks "$DOWN_PID")
	section "phase $name: wrk -t$THREADS -c$CONNS -d${DURATION}s --timeout 30s --latency $url -- $*"
	# --timeout 30s: at wrk's default of 2 s, slower answers would count as
	# socket errors and drop out of the latencies.
	wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --timeout 30s --latency -s bench/webhook.lua "$url" -- "$@" | tee "$out"
	t1=$(now) c1=$(cpu_ticks "$pid") s1=$(sys_ticks) io1=$(written "$pid")
	[ -z "$DOWN_PID" ] || d1=$(cpu_ticks "$DOWN_PID")
	children_cpu
	w1=$CHILD_CPU

	# CPU in % of one core. other = the machine's busy time (all cores, less
	# steal) not accounted to the server, the downstream or wrk: kernel
	# interrupt work for loopback traffic, and any other process running.
	local wall cpu downcpu wrkcpu busy other steal
	wall=$(calc "$t1 - $t0" 3)
	cpu=$(calc "($c1 - $c0) / $CLK_TCK / $wall * 100")
	downcpu=$(calc "($d1 - $d0) / $CLK_TCK / $wall * 100")
	wrkcpu=$(calc "($w1 - $w0) / $wall * 100")
	read -r busy steal < <(echo "$s0 $s1" | awk -v n="$NCPU" '{
		all = $4 - $1; printf "%.1f %.0f\n", n * 100 * (all - ($5 - $2) - ($6 - $3)) / all, n * 100 * ($6 - $3) / all }')
	other=$(calc "$busy - $cpu - $downcpu - $wrkcpu")

	# wrk's done() line: requests= duration_us= p50_us= ... timeout=
	local requests duration_us p50_us p90_us p99_us max_us non2xx3xx connect read write timeout
	eval "$(awk '/^BENCH / { for (i = 2; i <= NF; i++) print "local " $i }' "$out")"
	while read -r _ tid sent; do SENT[${tid#tid=}]=${sent#sent=}; done < <(grep '^BENCH_THREAD' "$out")
	local rps ratio="-" fwd="-" outbox="-" perreceipt="-" decisions="-" rss serverp99="-"
	rps=$(calc "$requests / ($duration_us / 1e6)")
	rss=$(calc "$(rss_kb "$pid") / 1024")
	if [ "$name" = ceiling ]; then
		CEILING_RPS=$rps
	else
		read -ra after <<<"$(counters)"
		server_buckets "${url##*/}" >"$WORK/buckets-after"
		serverp99="≤ $(server_p99 "$WORK/buckets-before" "$WORK/buckets-after")"
		[ "$CEILING_RPS" = 0 ] || ratio=$(calc "$rps / $CEILING_RPS" 2)
		fwd=$(calc "(${after[5]} - ${before[5]}) / $wall")
		outbox=$(metric webhookd_outbox_pending "source=\"${url##*/}\"")
		perreceipt=$(calc "$(disk_bytes "$WORK/data") / (${after[0]} + ${after[2]})")
		decisions="acc $((after[0] - before[0])) dup $((after[1] - before[1])) stale $((after[2] - before[2]))"
		decisions+=" confl $((after[3] - before[3])) rej $((after[4] - before[4]))"
	fi
	ROWS+=("$name|$rps|$(calc "$p50_us / 1000" 2)|$(calc "$p90_us / 1000" 2)|$(calc "$p99_us / 1000" 2)|$(calc "$max_us / 1000")|$serverp99|$ratio|$fwd|$outbox|$rss|$perreceipt|$(calc "($io1 - $io0) / $requests / 1024" 1)|$cpu|$downcpu|$wrkcpu|$other|$steal|$non2xx3xx / $((connect + read + write + timeout))|$decisions")
}

say "machine: $NCPU cores, $(awk '/^model name/ { sub(/.*: /, ""); print; exit }' /proc/cpuinfo), $(awk '/^MemTotal:/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) RAM, kernel $(uname -r), $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg)"
say "work dir: $WORK; webhookd binary sha256 $(sha256sum "$WORK/bin/webhookd" | cut -c1-12)"

# 1. The ceiling first, alone on the machine: a bare Fiber endpoint.
"$WORK/bin/ceiling" -listen "$HOST:$CEILING_PORT" >"$WORK/ceiling.log" 2>&1 &
CEILING_PID=$! PIDS+=("$CEILING_PID")
wait_up "http://$HOST:$CEILING_PORT/"
phase ceiling "$CEILING_PID" "$CEILING_URL" ceiling
kill -TERM "$CEILING_PID"
wait "$CEILING_PID" 2>/dev/null || true
forget "$CEILING_PID"

# 2. The downstream and webhookd on a fresh data directory.
"$WORK/bin/downstream" -listen "$HOST:$DOWN_PORT" >"$WORK/downstream.log" 2>&1 &
DOWN_PID=$! PIDS+=("$DOWN_PID")
wait_up "$COUNT_URL"

ADMIN_TOKEN=bench-$RANDOM$RANDOM
# What both sources read from a request, matching bench/webhook.lua's bodies.
SELECTORS='    request_id: json:request_id
    delivery_id: header:X-Delivery-Id
    resource: json:data.id
    version: json:data.version
    version_format: integer
    fingerprint_exclude: [sent_at]'
# Every route's settings.
ROUTE="        timeout: $((DURATION + 300))s # outlasts the backlog phase, during which the downstream holds requests
        concurrency: $FORWARD_CONCURRENCY
        max_attempts: 12
        backoff: { initial: 1s, max: 1m }"
rm -rf "$WORK/data"
cat >"$WORK/webhookd.yaml" <<EOF
# Written by bench/run.sh.
listen: "$HOST:$HOOK_PORT"
data_dir: $WORK/data
receipt_ttl: 168h
max_body: 1048576
shutdown_timeout: 5s
log: { level: warn, format: json }
admin:
  listen: "$HOST:$ADMIN_PORT"
  token: "$ADMIN_TOKEN"
sources:
  # intake: the bench source without forwarding, to measure intake alone.
  - name: intake
$SELECTORS
  - name: bench
$SELECTORS
    routes:
      - url: http://$HOST:$DOWN_PORT/bench
$ROUTE
  # fanout: the bench source with three routes, each taking every delivery.
  - name: fanout
$SELECTORS
    routes:
      - name: all
        url: http://$HOST:$DOWN_PORT/fanout-all
$ROUTE
      - name: typed
        url: http://$HOST:$DOWN_PORT/fanout-typed
        filter: 'body.type.startsWith("subscription.")'
$ROUTE
      - name: versioned
        url: http://$HOST:$DOWN_PORT/fanout-versioned
        filter: 'has(body.data.version) && body.data.version > 0'
$ROUTE
EOF
# With a memory limit, webhookd runs in its own memory cgroup (v2, or v1's
# memory hierarchy), as in a container limited to that much memory.
if [ -n "$MEMORY_LIMIT" ]; then
	if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
		CGROUP=/sys/fs/cgroup/webhookd-bench-$$ limit_file=memory.max
	else
		CGROUP=/sys/fs/cgroup/memory/webhookd-bench-$$ limit_file=memory.limit_in_bytes
	fi
	if ! { mkdir "$CGROUP" && echo "$MEMORY_LIMIT" >"$CGROUP/$limit_file"; } 2>/dev/null; then
		say "--memory-limit needs root and a writable memory cgroup ($CGROUP)" >&2
		exit 1
	fi
fi
if [ -n "$CGROUP" ]; then
	sh -c 'echo $$ >"$1/cgroup.procs" && exec "$2" serve --config "$3"' sh "$CGROUP" "$WORK/bin/webhookd" "$WORK/webhookd.yaml" >"$WORK/webhookd.log" 2>&1 &
else
	"$WORK/bin/webhookd" serve --config "$WORK/webhookd.yaml" >"$WORK/webhookd.log" 2>&1 &
fi
HOOKD_PID=$! PIDS+=("$HOOKD_PID")
wait_up "http://$HOST:$HOOK_PORT/readyz"
echo; say "webhookd pid $HOOKD_PID, config $WORK/webhookd.yaml, RSS at start $(calc "$(rss_kb "$HOOKD_PID") / 1024") MiB," \
	"memory cgroup ${CGROUP:-none}${MEMORY_LIMIT:+ limited to $MEMORY_LIMIT bytes}"

phase intake "$HOOKD_PID" "$INTAKE_URL" accept
phase accept "$HOOKD_PID" "$HOOK_URL" accept
ACCEPT_RPS=$(echo "${ROWS[-1]}" | cut -d'|' -f2)
phase fanout "$HOOKD_PID" "$FANOUT_URL" accept fan
phase dup "$HOOKD_PID" "$HOOK_URL" dup "${SENT[1]}" "${SENT[2]}"
phase mixed "$HOOKD_PID" "$HOOK_URL" mixed
# The downstream holds what it gets, so that intake builds an outbox
# backlog; the drain below then times forwarding alone.
curl -sf --max-time 10 -X POST "http://$HOST:$DOWN_PORT/hold"
phase backlog "$HOOKD_PID" "$HOOK_URL" backlog

# 3. Drain: drain releases the downstream (if it holds) and times the outbox
# emptying with no intake; DRAIN_ROW gets the table row: forwarding alone.
drain() {
	local c pending d0 d1 c0 c1 dc0 dc1 drained wall
	read -ra c <<<"$(counters)"
	pending=$(metric webhookd_outbox_pending 'source="bench"')
	section "drain: $pending entries pending; releasing the downstream, waiting up to ${DRAIN_TIMEOUT}s"
	c0=$(cpu_ticks "$HOOKD_PID") dc0=$(cpu_ticks "$DOWN_PID") d0=$(now) drained=${c[5]}
	curl -sf --max-time 10 -X POST "http://$HOST:$DOWN_PORT/release"
	while [ "$pending" -gt 0 ] && [ "$(calc "$(now) - $d0 < $DRAIN_TIMEOUT")" = 1 ]; do
		sleep 0.2
		scrape
		pending=$(metric webhookd_outbox_pending 'source="bench"')
	done
	d1=$(now) c1=$(cpu_ticks "$HOOKD_PID") dc1=$(cpu_ticks "$DOWN_PID")
	read -ra c <<<"$(counters)"
	wall=$(calc "$d1 - $d0" 3)
	say "drain: $((c[5] - drained)) forwarded in $(calc "$wall" 1)s ($(calc "(${c[5]} - $drained) / $wall")/s); outbox pending now $pending"
	DRAIN_ROW="drain|-|-|-|-|-|-|-|$(calc "(${c[5]} - $drained) / $wall")|$pending|$(calc "$(rss_kb "$HOOKD_PID") / 1024")|-|-"
	DRAIN_ROW+="|$(calc "($c1 - $c0) / $CLK_TCK / $wall * 100")|$(calc "($dc1 - $dc0) / $CLK_TCK / $wall * 100")|-|-|-|-|forwarded $((c[5] - drained)) in $(calc "$wall" 1) s"
	if [ "$pending" -gt 0 ]; then
		say "OUTBOX DID NOT DRAIN within ${DRAIN_TIMEOUT}s; first entries:"
		curl -s --max-time 10 -H "Authorization: Bearer $ADMIN_TOKEN" "http://$HOST:$ADMIN_PORT/admin/outbox?source=bench" | head -c 2000
		echo
	fi
	say "totals: accepted ${c[0]}, duplicate ${c[1]}, stale ${c[2]}, conflict ${c[3]}, rejected ${c[4]};" \
		"forwards delivered ${c[5]}, retried ${c[6]}, dead ${c[7]}; downstream $(curl -s --max-time 10 "$COUNT_URL")"
}
drain
ROWS+=("$DRAIN_ROW")
disk_report() {
	local c
	read -ra c <<<"$(counters)"
	say "disk: $(disk_bytes "$WORK/data") bytes in $WORK/data (du), Badger lsm $(metric webhookd_badger_lsm_bytes) + vlog $(metric webhookd_badger_vlog_bytes) bytes;" \
		"$(calc "$(disk_bytes "$WORK/data") / (${c[0]} + ${c[2]})") bytes per receipt (accepted + stale)"
}
disk_report
say "webhookd: $(rss_detail "$HOOKD_PID")(Go heap in use $(calc "$(metric go_memstats_heap_inuse_bytes) / 1048576") MiB)," \
	"CPU $(calc "$(cpu_ticks "$HOOKD_PID") / $CLK_TCK" 1) s in all; downstream CPU $(calc "$(cpu_ticks "$DOWN_PID") / $CLK_TCK" 1) s;" \
	"webhookd log (warn and above): $(wc -l <"$WORK/webhookd.log") lines"
grep -v '^webhookd: ' "$WORK/webhookd.log" | head -5 || true

# 4. The table.
section "results: wrk -t$THREADS -c$CONNS -d${DURATION}s per phase, 1024-byte bodies, route concurrency $FORWARD_CONCURRENCY, 127.0.0.1, $NCPU cores shared by wrk and the servers"
say "vs ceiling = req/s / ceiling req/s; RSS = the server's VmRSS right after the phase"
say "CPU columns: % of one core over the phase (utime+stime from /proc); other = busy machine time not in the three processes (kernel, other processes); steal = taken by the hypervisor"
say "fwd/s = forwards delivered during the phase / phase time; outbox = pending right after the phase; B/receipt = du of the data dir / (accepted + stale) so far"
say "p50-max: wrk's, request written to answer read; server p99: the bucket of webhookd_intake_duration_seconds (handler start to answer) that holds the phase's 99th percentile"
say "KiB written/req = what the server had written to disk during the phase (/proc write_bytes) / requests"
{
	echo "phase|req/s|p50 ms|p90 ms|p99 ms|max ms|server p99 ms|vs ceiling|fwd/s|outbox|RSS MiB|B/receipt|KiB written/req|CPU server|CPU downstr|CPU wrk|CPU other|steal|non-2xx / sock err|decisions"
	printf '%s\n' "${ROWS[@]:1}" "${ROWS[0]}"
} | column -t -s'|' -o' | '

# 5. Soak (optional): half the accept phase's rate, RSS every 10 s.
if [ "$SOAK_MIN" != 0 ]; then
	rate=$SOAK_RATE how="as asked"
	if [ "$rate" = 0 ]; then
		rate=$(calc "$ACCEPT_RPS / 2") how="half the accept phase"
	fi
	section "soak: ${SOAK_MIN} min at $rate req/s ($how), $CONNS connections, RSS every 10 s"
	children_cpu
	soak_w0=$CHILD_CPU soak_c0=$(cpu_ticks "$HOOKD_PID") soak_t0=$(now)
	"$WORK/bin/loadgen" -url "$HOOK_URL" -rate "$rate" -duration "${SOAK_MIN}m" -conns "$CONNS" -prefix "soak$RANDOM" >"$WORK/loadgen.txt" 2>&1 &
	LOADGEN_PID=$! PIDS+=("$LOADGEN_PID")
	samples=() anon=() ticks=0
	# Checked every second, so the CPU window below ends within a second of
	# the load; sampled every ten.
	while kill -0 "$LOADGEN_PID" 2>/dev/null; do
		sleep 1
		ticks=$((ticks + 1))
		[ $((ticks % 10)) = 0 ] || continue
		kill -0 "$LOADGEN_PID" 2>/dev/null || break
		samples+=("$(rss_kb "$HOOKD_PID")")
		anon+=("$(awk '/^RssAnon:/ { print $2 }' "/proc/$HOOKD_PID/status")")
		scrape
		say "  t=$((${#samples[@]} * 10))s $(rss_detail "$HOOKD_PID")Go heap alloc $(calc "$(metric go_memstats_heap_alloc_bytes) / 1048576") MiB," \
			"outbox $(metric webhookd_outbox_pending 'source="bench"'), accepted $(decided accepted)"
	done
	soak_c1=$(cpu_ticks "$HOOKD_PID") soak_wall=$(calc "$(now) - $soak_t0" 3)
	wait "$LOADGEN_PID" || true
	forget "$LOADGEN_PID"
	children_cpu
	cat "$WORK/loadgen.txt"
	say "soak CPU, % of one core: webhookd $(calc "($soak_c1 - $soak_c0) / $CLK_TCK / $soak_wall * 100")," \
		"loadgen $(calc "($CHILD_CPU - $soak_w0) / $soak_wall * 100") (behind = requests the schedule had to hold back while a second's worth was already queued)"
	if [ "${#samples[@]}" -lt 2 ]; then
		say "soak: too short for a verdict (fewer than two samples)"
	else
		first=${samples[0]} max=$(printf '%s\n' "${samples[@]}" | sort -n | tail -1)
		growth=$(calc "($max - $first) * 100 / $first" 1)
		verdict=$([ "$(calc "$max <= $first * 1.10")" = 1 ] && echo "STABLE (within 10 %)" || echo "GREW MORE THAN 10 %")
		say "soak: RSS first sample $(calc "$first / 1024") MiB, max $(calc "$max / 1024") MiB, last $(calc "${samples[-1]} / 1024") MiB: +$growth % -> $verdict"
		amax=$(printf '%s\n' "${anon[@]}" | sort -n | tail -1)
		say "soak: of which RssAnon (heap) first $(calc "${anon[0]} / 1024") MiB, max $(calc "$amax / 1024") MiB, last $(calc "${anon[-1]} / 1024") MiB;" \
			"the rest is RssFile (Badger's memory-mapped files)"
		# Growth shows as a trend between the ends; a collector's sawtooth does not.
		say "soak: mean RSS of the first and the last minute $(ends "${samples[@]}"); RssAnon $(ends "${anon[@]}")"
	fi
	drain
	disk_report
fi

# 6. PostgreSQL (optional): pgbench's ceiling, then 1 and 3 replicas.
if [ -n "$PG_DSN" ]; then
	for tool in psql pgbench; do
		command -v "$tool" >/dev/null || { say "--postgres needs $tool" >&2; exit 1; }
	done
	# Badger's webhookd is done: the machine's cores go to PostgreSQL.
	kill -TERM "$HOOKD_PID"
	wait "$HOOKD_PID" 2>/dev/null || true
	forget "$HOOKD_PID"
	PG_BASE=${PG_DSN%/*}
	# pg_db NAME: a fresh database NAME, with webhookd's schema when asked
	# (--schema), dropped on exit.
	pg_db() {
		psql -q "$PG_DSN" -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1"
		PG_DBS+=("$1")
		[ "${2:-}" != --schema ] || psql -q "$PG_BASE/$1" -v ON_ERROR_STOP=1 -f postgres/migrations/0001_init.sql
	}
	PG_ROWS=()
	section "postgres: $(psql -tAc 'SELECT version()' "$PG_DSN" | cut -d, -f1); synchronous_commit $(psql -tAc 'SHOW synchronous_commit' "$PG_DSN"), fsync $(psql -tAc 'SHOW fsync' "$PG_DSN")"

	# pgbench: the database's ceiling, with as many connections as wrk.
	pg_db webhookd_bench_pgbench --schema
	section "pgbench -n -M prepared -c$CONNS -j$THREADS -T$DURATION -f bench/pgbench.sql"
	# pg_ticks PID...: the CPU ticks of the processes, summed.
	pg_ticks() { local p sum=0; for p in "$@"; do sum=$((sum + $(cpu_ticks "$p" 2>/dev/null || echo 0))); done; echo "$sum"; }
	# pg_cpu: the CPU ticks of PostgreSQL: its live processes and those the
	# postmaster has reaped (pgbench's backends end with it).
	pg_cpu() {
		local pm
		pm=$(pgrep -o -x postgres)
		echo $(($(pg_ticks $(pgrep -x postgres)) + $(sed 's/.*) //' "/proc/$pm/stat" | awk '{ print $14 + $15 }')))
	}
	pc0=$(pg_cpu) t0=$(now)
	pgbench -n -M prepared -c"$CONNS" -j"$THREADS" -T"$DURATION" -f bench/pgbench.sql "$PG_BASE/webhookd_bench_pgbench" | tee "$WORK/pgbench.txt"
	pc1=$(pg_cpu) t1=$(now)
	PG_CEILING=$(awk '/^tps = / { printf "%.0f", $3 }' "$WORK/pgbench.txt")
	PG_ROWS+=("pgbench, 3 statements a transaction|-|$PG_CEILING|-|$(awk '/^latency average/ { print $4 }' "$WORK/pgbench.txt") (mean)|-|-|-|1.00|-|$(calc "($pc1 - $pc0) * 100 / $CLK_TCK / ($t1 - $t0)")")

	# pg_phase N SOURCE: N replicas on a fresh database, a wrk each posting
	# to SOURCE (bench: with forwarding; fanout: to three routes; intake:
	# without), then the drain.
	pg_phase() {
		local n=$1 source=$2 db=webhookd_bench_$1_$2 pids=() wrks=() i port t0 t1 wall before=0 after=0 req=0 rps p99=0 drained pending
		pg_db "$db"
		for ((i = 0; i < n; i++)); do
			port=${PG_PORTS[i]}
			sed -e "s|^listen: .*|listen: \"$HOST:$port\"|" -e "s|^  listen: .*|  listen: \"$HOST:$((port + 1))\"|" \
				-e "s|^data_dir: .*|storage: { backend: postgres, dsn: \"$PG_BASE/$db\", pool_size: 16 }|" \
				"$WORK/webhookd.yaml" >"$WORK/webhookd-pg$n-$i.yaml"
			"$WORK/bin/webhookd" serve --config "$WORK/webhookd-pg$n-$i.yaml" >"$WORK/webhookd-pg$n-$i.log" 2>&1 &
			pids+=($!) PIDS+=($!)
		done
		for ((i = 0; i < n; i++)); do wait_up "http://$HOST:${PG_PORTS[i]}/readyz"; done
		pg_delivered() { # forwards delivered, summed over the replicas
			local sum=0 i
			for ((i = 0; i < n; i++)); do
				METRICS_URL=http://$HOST:$((PG_PORTS[i] + 1))/metrics scrape
				sum=$((sum + $(delivered)))
			done
			echo "$sum"
		}
		pg_pending() { METRICS_URL=http://$HOST:$((PG_PORTS[0] + 1))/metrics scrape; metric webhookd_outbox_pending "source=\"$source\""; }
		local what="accept with forwarding"
		[ "$source" != fanout ] || what="accept with forwarding to three routes"
		[ "$source" != intake ] || what="intake alone"
		section "postgres, $n replica(s): wrk -t$THREADS -c$CONNS in all, -d${DURATION}s, $what"
		# CPU of the replicas and of every PostgreSQL process (backends,
		# WAL writer, checkpointer).
		local hc0 pc0 hc1 pc1
		hc0=$(pg_ticks "${pids[@]}") pc0=$(pg_cpu)
		before=$(pg_delivered) t0=$(now)
		for ((i = 0; i < n; i++)); do
			# Connections and threads split over the replicas; each wrk
			# sends request IDs of its own.
			wrk -t$((THREADS > n ? THREADS / n : 1)) -c$((CONNS / n + (i < CONNS % n ? 1 : 0))) -d"${DURATION}s" --timeout 30s --latency \
				-s bench/webhook.lua "http://$HOST:${PG_PORTS[i]}/hooks/$source" -- accept "pg$n-$source-$i" >"$WORK/wrk-pg$n-$i.txt" &
			wrks+=($!)
		done
		for pid in "${wrks[@]}"; do wait "$pid"; done
		t1=$(now) after=$(pg_delivered)
		hc1=$(pg_ticks "${pids[@]}") pc1=$(pg_cpu)
		wall=$(calc "$t1 - $t0" 3)
		for ((i = 0; i < n; i++)); do
			grep -E '^(Requests/sec|BENCH )' "$WORK/wrk-pg$n-$i.txt"
			eval "$(awk '/^BENCH / { for (i = 2; i <= NF; i++) print "local w_" $i }' "$WORK/wrk-pg$n-$i.txt")"
			req=$(calc "$req + $w_requests / ($w_duration_us / 1e6)")
			p99=$(calc "$w_p99_us > $p99 ? $w_p99_us : $p99")
		done
		rps=$req
		pending=$(pg_pending) drained=$after t0=$(now)
		while [ "$pending" -gt 0 ] && [ "$(calc "$(now) - $t0 < $DRAIN_TIMEOUT")" = 1 ]; do
			sleep 0.2
			pending=$(pg_pending)
		done
		t1=$(now)
		local dwall fwd_after
		dwall=$(calc "$t1 - $t0" 3) fwd_after=$(pg_delivered)
		say "drain: $((fwd_after - drained)) forwarded in $(calc "$dwall" 1)s; outbox pending now $pending"
		# A drain shorter than a second measures the poll, not forwarding.
		local drain_rate=-
		[ "$(calc "$dwall >= 1")" = 0 ] || drain_rate=$(calc "($fwd_after - $drained) / $dwall")
		PG_ROWS+=("webhookd, postgres, $what|$n|$(calc "$rps")|$(calc "($after - $before) / $wall")|$(calc "$p99 / 1000" 2) (wrk p99, worst replica)|$drain_rate|$pending|$(calc "$dwall" 1)|$(calc "$rps / $PG_CEILING" 2)|$(calc "($hc1 - $hc0) * 100 / $CLK_TCK / $wall")|$(calc "($pc1 - $pc0) * 100 / $CLK_TCK / $wall")")
		[ "$n" != 1 ] || [ "$source" != bench ] || PG_ONE=$rps
		for pid in "${pids[@]}"; do kill -TERM "$pid"; done
		for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; forget "$pid"; done
	}
	pg_phase 1 intake
	pg_phase 1 bench
	pg_phase 1 fanout
	pg_phase 3 bench
	section "postgres results: accepts with forwarding, ${DURATION}s, $CONNS connections in all, 1024-byte bodies, route concurrency $FORWARD_CONCURRENCY, $NCPU cores shared by wrk, webhookd, PostgreSQL and the downstream"
	say "fwd/s = forwards delivered during the accept phase / its time; drain fwd/s = after it, with no intake; vs pgbench = accepted/s / pgbench tps; CPU = % of one core over the phase, postgres: all its processes"
	say "3 replicas / 1 replica accepted/s: $(calc "$(echo "${PG_ROWS[-1]}" | cut -d'|' -f3) / $PG_ONE" 2)"
	{
		echo "run|replicas|accepted/s or tps|fwd/s|p99 ms|drain fwd/s|outbox after|drain s|vs pgbench|CPU webhookd %|CPU postgres %"
		printf '%s\n' "${PG_ROWS[@]}"
	} | column -t -s'|' -o' | '
fi

echo
say "work dir kept for inspection: $WORK ($(du -sh "$WORK" | cut -f1)); remove it when done"
