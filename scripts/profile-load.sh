#!/usr/bin/env bash
# One closed-loop `bench-client load` against a fresh `mock-server` (both from BINDIR), with the CPU
# each used and, unless PERF=0, a `perf record` of each (flat profiles: `perf report -i
# OUT/client.perf --no-children --sort dso,symbol`). Prints one line: client user/system/wall
# seconds and voluntary/involuntary context switches, the mock's CPU seconds (user, system), the
# streamed events and tokens, and the results file's size. OUTLEN sets the output length (128).
#
#   scripts/profile-load.sh BINDIR OUT [REQUESTS=500] [CONCURRENCY=64] [API=sglang]
#   PERF=0 scripts/profile-load.sh target/release /tmp/run 1000 64 openai
set -euo pipefail
B=$1
D=$2
N=${3:-500}
C=${4:-64}
API=${5:-sglang}
rm -rf "$D"
mkdir -p "$D"
PORT=$((30000 + RANDOM % 1000))
"$B/mock-server" --port "$PORT" --debug-endpoints --max-running-requests 1024 >"$D/mock.log" 2>&1 &
MP=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    sleep 0.05
done
PR=()
if [ "${PERF:-1}" = 1 ]; then
    perf record -F 1999 -o "$D/mock.perf" -p "$MP" >/dev/null 2>&1 &
    PP=$!
    PR=(perf record -F 1999 -o "$D/client.perf" --)
fi
/usr/bin/time -f '%U %S %e %w %c' -o "$D/time" "${PR[@]}" "$B/bench-client" load --url "http://127.0.0.1:$PORT" \
    --api "$API" --num-requests "$N" --concurrency "$C" --input-len 1024 --output-len "${OUTLEN:-128}" \
    --out "$D/r.jsonl" >"$D/client.log" 2>&1
if [ "${PERF:-1}" = 1 ]; then
    kill -INT "$PP"
    wait "$PP" || true
fi
MCPU=$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f (user %.2f sys %.2f)", ($14 + $15) / hz, $14 / hz, $15 / hz}' "/proc/$MP/stat")
kill "$MP"
wait "$MP" 2>/dev/null || true
EV=$(python3 - "$D/r.jsonl" <<'PY'
import json, sys
events = tokens = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    c = r["trace"]["chunks"]
    events += len(c["at_ns"]) if isinstance(c, dict) else len(c)
    tokens += r["completion_tokens"] or 0
print(events, tokens)
PY
)
echo "requests=$N concurrency=$C api=$API client(user sys wall)=$(tail -1 "$D/time") mock_cpu=$MCPU events,tokens=$EV results_bytes=$(stat -c %s "$D/r.jsonl")"
