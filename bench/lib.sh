# Shared by bench/run.sh and bench/growth.sh, which source it after they
# cd to the repository root.

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
