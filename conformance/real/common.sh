# shellcheck shell=bash
# Shared helpers for the real-server scripts (vllm.sh, llamacpp.sh, sglang.sh). Source it; do not run it.
#
# Everything installed lives under LLMB_REAL_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/llm-bench-real),
# outside the git checkout. A started server runs in its own session/process group; its pid, port and log
# live under $LLMB_REAL_CACHE/run/<name>.{pid,port,log}, and stop_server kills the whole group.
#
# Environment knobs (all optional):
#   LLMB_REAL_CACHE      cache dir for venvs, builds, models, run state
#   LLMB_PORT            fixed port (default: a free port chosen at start)
#   LLMB_READY_TIMEOUT   seconds to wait for /health before giving up (per-server default)
#   LLMB_URL             record/check against this already-running server instead of starting one
#   LLMB_BIN_DIR         run the client binaries (conformance, bench-client) from this directory instead of
#                        `cargo run --release -p ...` (e.g. a target/release of another checkout)

set -euo pipefail

REAL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$REAL_DIR/../.." && pwd)"
LLMB_REAL_CACHE="${LLMB_REAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-bench-real}"
RUN_DIR="$LLMB_REAL_CACHE/run"
TOOLS_VENV="$LLMB_REAL_CACHE/tools"
mkdir -p "$LLMB_REAL_CACHE" "$RUN_DIR"

log() { printf '[%s %s] %s\n' "$(date +%H:%M:%S)" "${SERVER_NAME:-real}" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Seconds since the epoch, for measured durations.
now_s() { date +%s; }

# A small venv with uv, cmake, ninja, gguf and numpy, all from PyPI. Idempotent.
ensure_tools() {
    if [[ ! -x "$TOOLS_VENV/bin/uv" || ! -x "$TOOLS_VENV/bin/cmake" || ! -x "$TOOLS_VENV/bin/ninja" ]] ||
        ! "$TOOLS_VENV/bin/python" -c 'import gguf, numpy' 2>/dev/null; then
        log "installing tools venv (uv, cmake, ninja, gguf, numpy) into $TOOLS_VENV"
        python3 -m venv "$TOOLS_VENV"
        nice -n 15 "$TOOLS_VENV/bin/pip" install -q --upgrade uv cmake ninja gguf numpy
    fi
}

# Print a free TCP port on 127.0.0.1 (or LLMB_PORT if set).
pick_port() {
    if [[ -n "${LLMB_PORT:-}" ]]; then
        echo "$LLMB_PORT"
        return
    fi
    python3 - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
EOF
}

# server_pid NAME: pid of a running server started by start_server, or nothing.
server_pid() {
    local f="$RUN_DIR/$1.pid" pid
    [[ -f "$f" ]] || return 0
    pid="$(cat "$f")"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
}

server_url() { echo "http://127.0.0.1:$(cat "$RUN_DIR/$1.port")"; }

# start_server NAME PORT CMD...: run CMD in a new session (its own process group), log to run/NAME.log.
start_server() {
    local name="$1" port="$2"
    shift 2
    if [[ -n "$(server_pid "$name")" ]]; then
        die "$name already running (pid $(server_pid "$name")); run stop first"
    fi
    echo "$port" >"$RUN_DIR/$name.port"
    log "starting: $*"
    log "log: $RUN_DIR/$name.log"
    setsid "$@" >"$RUN_DIR/$name.log" 2>&1 </dev/null &
    echo $! >"$RUN_DIR/$name.pid"
}

# stop_server NAME: TERM the whole process group, wait up to 20 s, then KILL it.
stop_server() {
    local name="$1" pid _
    pid="$(server_pid "$name")"
    if [[ -z "$pid" ]]; then
        rm -f "$RUN_DIR/$name.pid"
        return 0
    fi
    log "stopping $name (process group $pid)"
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do
        kill -0 -- "-$pid" 2>/dev/null || break
        sleep 0.5
    done
    if kill -0 -- "-$pid" 2>/dev/null; then
        log "$name did not exit after TERM; sending KILL to group $pid"
        kill -KILL -- "-$pid" 2>/dev/null || true
        sleep 1
    fi
    rm -f "$RUN_DIR/$name.pid"
}

# wait_ready NAME URL TIMEOUT_S: poll URL/health until HTTP 200, the server dies, or the time limit passes.
wait_ready() {
    local name="$1" url="$2" limit="$3" start code
    start="$(now_s)"
    while true; do
        if [[ -z "$(server_pid "$name")" ]]; then
            log "server exited before it was ready; last log lines:"
            tail -n 30 "$RUN_DIR/$name.log" >&2 || true
            return 1
        fi
        code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url/health" || true)"
        if [[ "$code" == "200" ]]; then
            log "ready at $url after $(($(now_s) - start)) s"
            echo "$(($(now_s) - start))" >"$RUN_DIR/$name.ready_s"
            return 0
        fi
        if (($(now_s) - start >= limit)); then
            log "not ready after $limit s (last /health status: ${code:-none}); last log lines:"
            tail -n 30 "$RUN_DIR/$name.log" >&2 || true
            return 1
        fi
        sleep 2
    done
}

# Install a trap that stops NAME on exit, interrupt or termination (used by record and check).
stop_on_exit() {
    # shellcheck disable=SC2064
    trap "stop_server '$1'" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# use_server: SERVER_URL is $LLMB_URL when set, else a fresh server (the script's `start`), stopped on exit.
use_server() {
    if [[ -n "${LLMB_URL:-}" ]]; then
        SERVER_URL="$LLMB_URL"
    else
        stop_on_exit "$SERVER_NAME"
        SERVER_URL="$(start)"
    fi
}

# A prompt of N token ids in [100, 4000), deterministic per SEED, as a JSON list on stdout.
prompt_ids() {
    python3 -c '
import random, sys
n, seed = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(seed)
print("[" + ",".join(str(r.randrange(100, 4000)) for _ in range(n)) + "]")
' "$1" "$2"
}

# repetitive_ids N [SEED]: N ids, an 8-id motif (chosen by SEED) repeated, so n-gram lookup drafts get accepted.
repetitive_ids() {
    python3 -c '
import sys
n = int(sys.argv[1])
s = int(sys.argv[2])
motif = [1201 + 8 * ((s + s // 1000) % 300) + k for k in range(8)]
print("[" + ",".join(str(motif[i % len(motif)]) for i in range(n)) + "]")
' "$1" "${2:-0}"
}

# rust_bin PACKAGE ARGS...: run a workspace binary from the repo root: `cargo run --release -p PACKAGE`, or
# $LLMB_BIN_DIR/PACKAGE when LLMB_BIN_DIR is set.
rust_bin() {
    local pkg="$1"
    shift
    if [[ -n "${LLMB_BIN_DIR:-}" ]]; then
        (cd "$REPO_ROOT" && "$LLMB_BIN_DIR/$pkg" "$@")
    else
        (cd "$REPO_ROOT" && cargo run --release -p "$pkg" -- "$@")
    fi
}

# run_rust_checks NAME URL MODEL CONTEXTS [API...]: the live conformance check and a short sweep on
# --api openai, outputs saved under target/real/NAME/; each further API (e.g. sglang) gets a sweep of its own,
# saved as sweep-API.{jsonl,txt}. Fails clearly if any command fails.
run_rust_checks() {
    local name="$1" url="$2" model="$3" contexts="$4" out rc=0 allow=() api
    shift 4
    # Known differences of a server from the mock's assumptions (docs/real-servers.md).
    for check in ${LLMB_ALLOW_FAIL:-}; do allow+=(--allow-fail "$check"); done
    out="$REPO_ROOT/target/real/$name"
    mkdir -p "$out"
    # Each check is a fresh run: the sweep refuses to append to an old results file without --resume.
    rm -f "$out"/sweep.jsonl "$out"/sweep.jsonl.manifest.jsonl
    log "conformance --url $url  (output: $out/conformance.txt)"
    if ! rust_bin conformance --url "$url" "${allow[@]}" \
        >"$out/conformance.txt" 2>&1; then
        log "FAILED: conformance --url $url; last lines of $out/conformance.txt:"
        tail -n 40 "$out/conformance.txt" >&2 || true
        rc=1
    else
        cat "$out/conformance.txt"
    fi
    log "bench-client sweep --contexts $contexts --runs 2  (output: $out/sweep*)"
    if ! rust_bin bench-client sweep --url "$url" --api openai \
        --model "$model" --contexts "$contexts" --runs 2 --out "$out/sweep.jsonl" >"$out/sweep.txt" 2>&1; then
        log "FAILED: bench-client sweep against $url; last lines of $out/sweep.txt:"
        tail -n 40 "$out/sweep.txt" >&2 || true
        rc=1
    else
        cat "$out/sweep.txt"
    fi
    for api in "$@"; do
        rm -f "$out/sweep-$api.jsonl" "$out/sweep-$api.jsonl.manifest.jsonl"
        log "bench-client sweep --api $api --contexts $contexts --runs 2  (output: $out/sweep-$api*)"
        if ! rust_bin bench-client sweep --url "$url" --api "$api" \
            --contexts "$contexts" --runs 2 --out "$out/sweep-$api.jsonl" >"$out/sweep-$api.txt" 2>&1; then
            log "FAILED: bench-client sweep --api $api against $url; last lines of $out/sweep-$api.txt:"
            tail -n 40 "$out/sweep-$api.txt" >&2 || true
            rc=1
        else
            cat "$out/sweep-$api.txt"
        fi
    done
    return "$rc"
}

# run_step NAME OUT_FILE PACKAGE ARGS...: run one client binary (rust_bin), save its output, print it.
run_step() {
    local what="$1" file="$2"
    shift 2
    log "$what  (output: $file)"
    if ! rust_bin "$@" >"$file" 2>&1; then
        log "FAILED: $what; last lines of $file:"
        tail -n 40 "$file" >&2 || true
        return 1
    fi
    cat "$file"
}

# warm_up OUT TARGET...: one unrecorded sweep (OUT/warmup.jsonl): the first requests after start pay
# one-time costs.
warm_up() {
    local out="$1"
    shift
    rust_bin bench-client sweep "$@" --contexts 256 --runs 1 --warmup 1 \
        --output-tokens 16 --no-progress --out "$out/warmup.jsonl" >/dev/null 2>&1 || true
}

# repeat_runs OUT SK TARGET...: repeat SK (side a or b, then its number) of one setup: a sweep at 256,
# 1k and 3k (OUT/sweep-SK.jsonl) and a load run at concurrency 4 (OUT/load-c4SK.jsonl), seeded by SK.
repeat_runs() {
    local out="$1" sk="$2" rc=0 side
    shift 2
    side=$([[ ${sk:0:1} == a ]] && echo 0 || echo 1)
    run_step "sweep $sk (256, 1k, 3k)" "$out/sweep-$sk.txt" bench-client sweep "$@" \
        --contexts 256,1024,3000 --runs 5 --warmup 1 --output-tokens 64 --no-progress \
        --seed "${sk:1}$((1 + side))" --out "$out/sweep-$sk.jsonl" || rc=1
    run_step "load $sk --concurrency 4" "$out/load-c4$sk.txt" bench-client load "$@" \
        --concurrency 4 --num-requests 24 --input-len 1024 --output-len 32 --warmup 2 \
        --seed "${sk:1}$((4 + side))" --no-progress --out "$out/load-c4$sk.jsonl" || rc=1
    return "$rc"
}

# run_decide NAME URL API [MODEL]: decisions on a real server: three repeat sweeps and three repeat load
# runs of each of two sides of one setup, interleaved (A B A B A B, so that a drift of the machine falls on
# both sides) and compared with the runs resampled by run (`compare` must say `same` or `unclear`, never
# `worse`); the first pair also compared alone, one run a side (what a single pair shows); load runs at
# concurrency 2 and 8 and a sweep at the held-out contexts (what `calibrate` fits from and predicts); and
# two `capacity` searches under an SLO. Outputs in target/real/NAME/decide/. LLMB_DECIDE_SLO (default
# ttft=1500,tpot=60), LLMB_DECIDE_RATES (default 0.5,1,2,4,8) and LLMB_DECIDE_CONCURRENCIES (default
# 1,2,4,8,16) set the searches.
run_decide() {
    local name="$1" url="$2" api="$3" out rc=0 r c k
    local target=(--url "$url" --api "$api")
    [[ -n "${4:-}" ]] && target+=(--model "$4")
    local slo="${LLMB_DECIDE_SLO:-ttft=1500,tpot=60}"
    out="$REPO_ROOT/target/real/$name/decide"
    mkdir -p "$out"
    rm -f "$out"/*.jsonl "$out"/*.txt "$out"/*.svg
    warm_up "$out" "${target[@]}"
    for k in 1 2 3; do
        for r in a b; do
            repeat_runs "$out" "$r$k" "${target[@]}" || rc=1
        done
    done
    run_step "compare sweep-a1 sweep-b1 (one run a side)" "$out/compare-sweep-pair.txt" bench-client compare \
        "$out/sweep-a1.jsonl" "$out/sweep-b1.jsonl" || rc=1
    run_step "compare sweeps a1-a3 with b1-b3 (three runs a side)" "$out/compare-sweep.txt" bench-client compare \
        --base "$out"/sweep-a{1,2,3}.jsonl --new "$out"/sweep-b{1,2,3}.jsonl --fail-on-regression || rc=1
    run_step "compare load-c4a1 load-c4b1 (one run a side)" "$out/compare-load-pair.txt" bench-client compare \
        "$out/load-c4a1.jsonl" "$out/load-c4b1.jsonl" || rc=1
    run_step "compare loads a1-a3 with b1-b3 (three runs a side)" "$out/compare-load.txt" bench-client compare \
        --base "$out"/load-c4a{1,2,3}.jsonl --new "$out"/load-c4b{1,2,3}.jsonl --slo "$slo" \
        --fail-on-regression || rc=1
    run_step "sweep at the held-out contexts (512, 2k)" "$out/sweep-heldout.txt" bench-client sweep \
        "${target[@]}" --contexts 512,2048 --runs 5 --warmup 1 --output-tokens 64 --no-progress \
        --seed 3 --out "$out/sweep-heldout.jsonl" || rc=1
    for c in 2 8; do
        run_step "load --concurrency $c" "$out/load-c$c.txt" bench-client load "${target[@]}" \
            --concurrency "$c" --num-requests 24 --input-len 1024 --output-len 32 --warmup 2 \
            --seed 4 --no-progress --out "$out/load-c$c.jsonl" || rc=1
    done
    # What `calibrate` fits from: the first sweep and concurrency-4 run of side A.
    for f in sweep-a1:sweep-a load-c4a1:load-c4; do
        cp "$out/${f%:*}.jsonl" "$out/${f#*:}.jsonl"
        cp "$out/${f%:*}.jsonl.manifest.jsonl" "$out/${f#*:}.jsonl.manifest.jsonl" 2>/dev/null || true
    done
    run_step "capacity --slo $slo" "$out/capacity.txt" bench-client capacity \
        "${target[@]}" --slo "$slo" \
        --rates "${LLMB_DECIDE_RATES:-0.5,1,2,4,8}" --refine 2 --num-requests 24 --input-len 512 \
        --output-len 32 --out "$out/capacity.jsonl" --plot "$out/capacity.svg" || rc=1
    run_step "capacity --concurrencies ${LLMB_DECIDE_CONCURRENCIES:-1,2,4,8,16}" "$out/capacity-concurrency.txt" \
        bench-client capacity "${target[@]}" --slo "$slo" \
        --concurrencies "${LLMB_DECIDE_CONCURRENCIES:-1,2,4,8,16}" --refine 2 --num-requests 16 \
        --input-len 512 --output-len 32 --out "$out/capacity-concurrency.jsonl" || rc=1
    run_twin_check "$out" || rc=1
    log "decide: outputs in $out"
    return "$rc"
}

# run_twin NAME URL API [MODEL]: only what the twin check needs, in target/real/NAME/twin/:
# LLMB_TWIN_ROUNDS (default 5) rounds of an interleaved sweep at 256, 512, 1k, 2k and 3k (the fit's
# contexts and the held-out ones, run round-robin), a load run at concurrency 4 (what `calibrate` fits
# from) and held-out load runs at concurrency 2 and 8, one of mixed inputs (concurrency 6, uniform
# over 256..2k tokens) and one of Poisson arrivals (768 tokens in, at `twin_poisson_rate`): what the
# twin predicts. Then `run_twin_check`.
# Requests of a held-out load run at concurrency $1, on the server and in the twin alike.
held_out_requests() { echo $((8 * $1 + 8)); }
# The held-out loads of other shapes, by name: their flags, on the server and in the twin alike.
TWIN_MIXED=(--concurrency 6 --num-requests 56 --input-len uniform:256:2048 --output-len 32 --warmup 2)
TWIN_POISSON=(--num-requests 60 --input-len 768 --output-len 32 --warmup 2)
# twin_poisson_rate DIR: the Poisson load's rate, in DIR/poisson-rate (run_twin_check reads it back).
# Half the request throughput of DIR's first load run at concurrency 4, to two significant digits:
# 4 req/s on the machine where that load was first measured, as far below saturation on any machine
# (a load past it measures the run's length, not the server). LLMB_TWIN_POISSON_RATE sets it.
twin_poisson_rate() {
    local d="$1"
    if [[ -f "$d/poisson-rate" ]]; then
        :
    elif [[ -n "${LLMB_TWIN_POISSON_RATE:-}" ]]; then
        echo "$LLMB_TWIN_POISSON_RATE" >"$d/poisson-rate"
    else
        python3 - "$d/load-c4a1.jsonl" >"$d/poisson-rate" <<'PY' || return 1
import json, sys
ok = [r for r in map(json.loads, open(sys.argv[1])) if r.get("error") is None and r.get("load")]
start = min(r["load"]["start_unix_ms"] * 1e6 + r["load"]["scheduled_ns"] for r in ok)
end = max(r["load"]["start_unix_ms"] * 1e6 + r["load"]["sent_ns"] + r["e2e_ms"] * 1e6 for r in ok)
print(f"{0.5 * len(ok) / ((end - start) / 1e9):.2g}")
PY
    fi
    cat "$d/poisson-rate"
}
# The sweep contexts `calibrate` fits from; the twin predicts the others.
TWIN_FIT_CONTEXTS=256,1024,3000

run_twin() {
    local name="$1" url="$2" api="$3" out rc=0 k c rate
    local target=(--url "$url" --api "$api")
    [[ -n "${4:-}" ]] && target+=(--model "$4")
    out="$REPO_ROOT/target/real/$name/twin"
    mkdir -p "$out"
    rm -f "$out"/*.jsonl "$out"/*.txt "$out"/*.json "$out"/*.md "$out"/*.toml "$out/poisson-rate"
    warm_up "$out" "${target[@]}"
    # Rounds, each with its share of what is fitted and of what is predicted, so that a drift of the
    # machine falls on both; within a round's sweep the fitted and held-out contexts alternate request
    # by request. Every context gets 5 requests a round, the load runs 24 (c=2) and 72 (c=8).
    for k in $(seq 1 "${LLMB_TWIN_ROUNDS:-5}"); do
        run_step "sweep $k (256, 512, 1k, 2k, 3k, interleaved)" "$out/sweep-a$k.txt" bench-client sweep \
            "${target[@]}" --contexts 256,512,1024,2048,3000 --interleave --runs 5 --warmup 1 \
            --output-tokens 64 --no-progress --seed "${k}1" --out "$out/sweep-a$k.jsonl" || rc=1
        run_step "load a$k --concurrency 4" "$out/load-c4a$k.txt" bench-client load "${target[@]}" \
            --concurrency 4 --num-requests 24 --input-len 1024 --output-len 32 --warmup 2 \
            --seed "${k}4" --no-progress --out "$out/load-c4a$k.jsonl" || rc=1
        for c in 2 8; do
            run_step "held-out load $k --concurrency $c" "$out/load-c$c-$k.txt" bench-client load \
                "${target[@]}" --concurrency "$c" --num-requests "$(held_out_requests "$c")" --input-len 1024 \
                --output-len 32 --warmup 2 --seed "${k}6" --no-progress --out "$out/load-c$c-$k.jsonl" || rc=1
        done
        run_step "held-out load $k, mixed inputs" "$out/load-mix-$k.txt" bench-client load "${target[@]}" \
            "${TWIN_MIXED[@]}" --seed "${k}7" --no-progress --out "$out/load-mix-$k.jsonl" || rc=1
        rate="$(twin_poisson_rate "$out")" || rc=1
        run_step "held-out load $k, Poisson arrivals at $rate req/s" "$out/load-poi-$k.txt" bench-client load \
            "${target[@]}" "${TWIN_POISSON[@]}" --request-rate "$rate" --seed "${k}8" --no-progress \
            --out "$out/load-poi-$k.jsonl" || rc=1
    done
    run_twin_check "$out" || rc=1
    log "twin: outputs in $out"
    return "$rc"
}

# run_twin_check DIR: the twin of a `run_decide` or `run_twin` server. `calibrate` fits the mock from DIR's
# sweeps at 256, 1k and 3k (sweep-a1.., sweep-b1..; held-out contexts in them are left out) and its load
# runs at concurrency 4 (load-c4a1.., load-c4b1..); the twin then runs, simulated, the held-out sweep
# (512, 2k) and the load runs at concurrency 2 and 8, as many rounds as the server's held-out load runs
# (3 for `run_decide`'s single ones), and DIR/twin-table.md gets measured, predicted and the error of TTFT
# and decode p50 (sweep) and TTFT and TPOT p50 (load), and the measured medians of each round (how far the
# server itself moved), with the Poisson load's requests paired by arrival (alone in the twin or
# overlapping). Targets (issue 20): 10% and 20%.
# LLMB_TWIN_CALIBRATE_ARGS: more `calibrate` flags (what the server does not report).
run_twin_check() {
    local d="$1" c k f rounds files=()
    rm -f "$d"/twin-*.jsonl "$d"/twin-*.json "$d"/twin-*.txt "$d/twin.toml" "$d/twin-table.md"
    for f in "$d"/sweep-[ab][0-9]*.jsonl; do
        [[ -f "$f" && "$f" != *.manifest.jsonl ]] || continue
        k="${f##*/sweep-}"
        files+=("$f" "$d/load-c4${k%.jsonl}.jsonl")
    done
    run_step "calibrate from $((${#files[@]} / 2)) sweeps and as many load runs at concurrency 4" "$d/calibrate.txt" \
        bench-client calibrate "${files[@]}" --contexts "$TWIN_FIT_CONTEXTS" ${LLMB_TWIN_CALIBRATE_ARGS:-} \
        --out "$d/twin.toml" || return 1
    rounds=0
    for f in "$d"/load-c2-[0-9]*.jsonl; do [[ -f "$f" && "$f" != *.manifest.jsonl ]] && rounds=$((rounds + 1)); done
    ((rounds > 0)) || rounds=3
    # As many rounds on the twin, each with its own draws (the mock's seed) and the server's round's
    # client seed, so that both sides' medians are over as many requests.
    for k in $(seq 1 "$rounds"); do
        run_step "the twin: held-out sweep $k (512, 2k), simulated" "$d/twin-heldout$k.txt" bench-client sweep \
            --preset-file "$d/twin.toml" --mock-set "seed=$k" --simulate --contexts 512,2048 --runs 5 --warmup 1 \
            --output-tokens 64 --seed "${k}1" --no-progress --out "$d/twin-heldout$k.jsonl" || return 1
        for c in 2 8; do
            run_step "the twin: load $k --concurrency $c, simulated" "$d/twin-c$c-$k.txt" bench-client load \
                --preset-file "$d/twin.toml" --mock-set "seed=$k" --simulate --concurrency "$c" \
                --num-requests "$(held_out_requests "$c")" --input-len 1024 --output-len 32 --warmup 2 \
                --seed "${k}6" --no-progress --out "$d/twin-c$c-$k.jsonl" || return 1
        done
        # The loads of other shapes where the server ran them (`run_twin`).
        if [[ -f "$d/load-mix-$k.jsonl" ]]; then
            run_step "the twin: load $k, mixed inputs, simulated" "$d/twin-mix-$k.txt" bench-client load \
                --preset-file "$d/twin.toml" --mock-set "seed=$k" --simulate "${TWIN_MIXED[@]}" \
                --seed "${k}7" --no-progress --out "$d/twin-mix-$k.jsonl" || return 1
        fi
        if [[ -f "$d/load-poi-$k.jsonl" ]]; then
            run_step "the twin: load $k, Poisson arrivals, simulated" "$d/twin-poi-$k.txt" bench-client load \
                --preset-file "$d/twin.toml" --mock-set "seed=$k" --simulate "${TWIN_POISSON[@]}" \
                --request-rate "$(twin_poisson_rate "$d")" --seed "${k}8" --no-progress \
                --out "$d/twin-poi-$k.jsonl" || return 1
        fi
    done
    python3 - "$d" >"$d/twin-table.md" <<'PY' || return 1
import glob, json, sys
from statistics import median
d = sys.argv[1] + "/"
def row(what, measured, twin, target, rounds):
    if measured is None or twin is None:
        print(f"| {what} | {measured or '-'} | {twin or '-'} | - | no: nothing measured | |")
        return
    err = 100 * (twin / measured - 1)
    ok = "yes" if abs(err) <= target else "no"
    spread = ", ".join(f"{v:.1f}" for v in rounds)
    print(f"| {what} | {measured:.1f} | {twin:.1f} | {err:+.1f}% | {ok} | {spread} |")
print("| what | measured | twin | error | within target | measured, by round (sample medians) |")
print("|---|---|---|---|---|---|")
def whole_at_once(r):
    """The server held the stream and sent it whole: its chunks all arrived at one instant (seen on
    vLLM on 2 cores, `calibrate` leaves them out alike). Its TTFT is the whole generation and its
    decode unmeasurable, so it measures nothing the twin models. The compact trace counts each
    chunk's instant from the one before."""
    at = (((r.get("trace") or {}).get("chunks") or {}).get("at_ns")) or []
    return len(at) > 1 and all(d == 0 for d in at[1:])
def files(prefix, held=False):
    """Each results file's successful records (manifests left out), file by file: those the server
    sent whole at one instant left out, or only those with `held`."""
    return [[r for r in map(json.loads, open(f)) if r.get("error") is None and whole_at_once(r) == held]
            for f in sorted(glob.glob(d + prefix + "*.jsonl")) if not f.endswith(".manifest.jsonl")]
def by_round(prefix, keep, get):
    out = []
    for recs in files(prefix):
        vals = [v for v in (get(r) for r in recs if keep(r)) if v is not None]
        if vals:
            out.append(median(vals))
    return out
# Every file of a side pooled (`run_twin` splits them over its rounds): the sample median (R-7, as
# the client's p50) of the per-request values.
def pooled(prefix, keep, get):
    vals = [v for recs in files(prefix) for v in (get(r) for r in recs if keep(r)) if v is not None]
    return median(vals) if vals else None
# The held-out contexts are the twin's; on the server they are in the held-out sweeps (`run_decide`)
# or interleaved with the fitted ones in each round's sweep (`run_twin`).
for ctx in sorted({r["context_tokens"] for recs in files("twin-heldout") for r in recs}):
    at = lambda r, ctx=ctx: r.get("context_tokens") == ctx
    for what, get in (("TTFT p50 ms", lambda r: r.get("ttft_ms")), ("decode p50 tok/s", lambda r: r.get("decode_tok_s"))):
        row(f"context {ctx}: {what}", pooled("sweep-", at, get), pooled("twin-heldout", at, get), 10,
            by_round("sweep-", at, get))
# Load runs: the sample median too, not the histogram's p50 (the lowest value with half at or below
# it), which reads one of the modes their TTFTs fall in, a prefill pass apart (at c=2, stalled by
# the other's prefill or not).
for c in (2, 8):
    loaded = lambda r: r.get("load") is not None
    for m, get in (("TTFT", lambda r: r["load"]["ttft_from_schedule_ms"]), ("TPOT", lambda r: r["tpot_ms"])):
        row(f"load c={c}: {m} median ms", pooled(f"load-c{c}", loaded, get), pooled(f"twin-c{c}", loaded, get),
            20, by_round(f"load-c{c}", loaded, get))
# The loads of other shapes (issue 34: within 10% on TTFT and TPOT p50), where the server ran them.
rate = open(d + "poisson-rate").read().strip() if glob.glob(d + "poisson-rate") else "?"
for name, what in (("mix", "mixed inputs c=6 (256..2k)"), ("poi", f"Poisson {rate} req/s (768 in)")):
    if not files(f"load-{name}-"):
        continue
    loaded = lambda r: r.get("load") is not None
    for m, get in (("TTFT", lambda r: r["load"]["ttft_from_schedule_ms"]), ("TPOT", lambda r: r["tpot_ms"])):
        row(f"load {what}: {m} median ms", pooled(f"load-{name}-", loaded, get),
            pooled(f"twin-{name}-", loaded, get), 10, by_round(f"load-{name}-", loaded, get))
# The Poisson load paired by arrival (the twin runs each round's schedule, so a request and its twin
# share an index): the server's median over the twin's for the requests alone in the twin (no other
# in flight from send to end) and for those that overlap, and each round's mean TPOT, which a median
# falling between the two kinds hides. `server_runs`, `twin_runs`: each round's records.
def paired(server_runs, twin_runs, what):
    kinds = {True: ([], []), False: ([], [])}
    means = []
    for server, twin in zip(server_runs, twin_runs):
        server = {r["load"]["index"]: r for r in server if r.get("load") and r.get("tpot_ms") is not None}
        twin = [r for r in twin if r.get("load") and r.get("tpot_ms")]
        spans = {r["load"]["index"]: (r["load"]["scheduled_ns"], r["load"]["scheduled_ns"] + r["e2e_ms"] * 1e6)
                 for r in twin}
        pairs = [(r, server[r["load"]["index"]]) for r in twin if r["load"]["index"] in server
                 and r["load"].get("ttft_from_schedule_ms")]
        for t, m in pairs:
            i = t["load"]["index"]
            a, b = spans[i]
            alone = not any(j != i and x < b and y > a for j, (x, y) in spans.items())
            kinds[alone][0].append(m["load"]["ttft_from_schedule_ms"] / t["load"]["ttft_from_schedule_ms"])
            kinds[alone][1].append(m["tpot_ms"] / t["tpot_ms"])
        if pairs and sum(m["tpot_ms"] for _, m in pairs) > 0:
            means.append(100 * (sum(t["tpot_ms"] for t, _ in pairs) / sum(m["tpot_ms"] for _, m in pairs) - 1))
    parts = [f"{label} ({len(ttft)}): TTFT x{median(ttft):.2f}, TPOT x{median(tpot):.2f}"
             for label, (ttft, tpot) in (("alone in the twin", kinds[True]), ("overlapping", kinds[False])) if ttft]
    if parts:
        print(f"\nLoad {what}, paired by arrival, the server's over the twin's (medians): " + "; ".join(parts)
              + ". Mean TPOT, the twin's against the server's, by round: "
              + ", ".join(f"{m:+.1f}%" for m in means) + ".")
poisson = (files("load-poi-"), files("twin-poi-"))
if all(poisson):
    paired(*poisson, f"Poisson {rate} req/s")
for prefix, what in (("sweep-", "the sweeps"), ("load-c2", "the c=2 load runs"), ("load-c8", "the c=8 load runs")):
    n = sum(len(recs) for recs in files(prefix, held=True))
    if n:
        print(f"\nLeft out of {what}: {n} requests whose stream the server sent whole at one instant"
              " (their TTFT is the whole generation, their decode unmeasurable).")
PY
    log "twin against the server ($d/twin-table.md):"
    cat "$d/twin-table.md"
}

