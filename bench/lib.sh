# shellcheck shell=bash
# Shared by bench/run.sh, bench/growth.sh and bench/backlog.sh, which
# source it after they cd to the repository root.

say() { printf '%s\n' "$*"; }

# stop_pids stops every process in PIDS: TERM, up to 5 s to exit, then
# KILL, and waits for each so that none is left behind.
stop_pids() {
	local pid
	for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
}

now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.${2:-0}f\", ($1) }"; }
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; } # utime + stime
rss_mib() { awk '/^VmRSS:/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }
anon_mib() { awk '/^RssAnon:/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }

# ports_free HOST PORT...: fails, saying which, if a port is in use.
ports_free() {
	local host=$1 port
	shift
	for port in "$@"; do
		if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
			say "port $host:$port is in use; stop what holds it first" >&2
			return 1
		fi
	done
}

# pg_db_ticks DSN DB: the CPU ticks of the PostgreSQL backends serving DB
# (webhookd's pooled connections), and none of another database's, which
# other users of the cluster may be loading.
pg_db_ticks() {
	local p sum=0
	for p in $(psql -Atc "SELECT pid FROM pg_stat_activity WHERE datname = '$2' AND pid <> pg_backend_pid()" "$1"); do
		sum=$((sum + $(cpu_ticks "$p" 2>/dev/null || echo 0)))
	done
	echo "$sum"
}
