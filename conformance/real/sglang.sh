#!/usr/bin/env bash
# SGLang (PyPI wheel, its CUDA build run on CPU) on loopback, serving a tiny random Llama written at install.
#
#   sglang.sh install   venv with uv: sglang==$SGLANG_VERSION (about 9.5 GB), the libcuda stub, the tiny model
#   sglang.sh start     start sglang.launch_server in the background and wait for /health (prints the URL)
#   sglang.sh stop      stop it (kills the whole process group)
#   sglang.sh record    start, record transcripts into fixtures/streams/real/sglang_*.json, stop; then the
#                       incremental-streaming cases on a second server (--incremental-streaming-output)
#   sglang.sh diff      start, send the differential battery (`conformance diff --real`) and save SGLang's
#                       answers into fixtures/diff/sglang-$SGLANG_VERSION (what `cargo test` replays), stop
#   sglang.sh check     start, run `conformance --url`, sweeps on --api sglang and --api openai, the two-point
#                       method with and without --flush-cache, a short load run, `conformance diff`, stop
#   sglang.sh decide    start, three repeat sweeps and load runs a side compared, load at concurrency 2/8, capacity
#                       searches by rate and by concurrency, stop (outputs in target/real/sglang/decide/)
#   sglang.sh twin      start, the twin check alone (calibrate, then predict the held-out runs), stop
#                       (outputs and the server log in target/real/sglang/twin/)
#   sglang.sh trace     start, replay 300 requests of Mooncake's conversation trace (lengths / 32), check
#                       every request recorded and the hit ratio against the trace's prediction, stop
#
# Env: LLMB_REAL_CACHE, LLMB_PORT, LLMB_READY_TIMEOUT (default 300), LLMB_URL (record/check against a running
# server), SGLANG_VERSION (default 0.5.23), SGLANG_INCREMENTAL=1 (start with --incremental-streaming-output),
# SGLANG_ARGS (more server arguments, e.g. --disable-overlap-schedule), LLMB_CONTEXTS (check's sweep contexts, default 256,1024,3000).
#
# Why the stub: the sglang-kernel CUDA wheel links libcuda.so.1 and calls one symbol of it,
# cuPointerGetAttribute; without a GPU driver the import fails. A stub libcuda.so.1 whose only function
# answers CUDA_ERROR_NO_DEVICE (100) gets past the import; torch.cuda.is_available() stays false.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SERVER_NAME=sglang
MODEL_NAME=tiny-llama
SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
VENV="$LLMB_REAL_CACHE/sglang-venv-$SGLANG_VERSION"
MODEL_DIR="$LLMB_REAL_CACHE/models/tiny-llama-sglang-hf"
STUB_DIR="$LLMB_REAL_CACHE/libcuda-stub"

install() {
    local t0
    if "$VENV/bin/python" -c "import sglang, sys; sys.exit(sglang.__version__ != '$SGLANG_VERSION')" 2>/dev/null; then
        log "sglang $SGLANG_VERSION already installed in $VENV"
    else
        ensure_tools
        t0="$(now_s)"
        log "installing sglang==$SGLANG_VERSION into $VENV (Python 3.11; about 9.5 GB, torch from PyPI)"
        nice -n 15 "$TOOLS_VENV/bin/uv" venv -q -p 3.11 "$VENV"
        VIRTUAL_ENV="$VENV" nice -n 15 "$TOOLS_VENV/bin/uv" pip install -q "sglang==$SGLANG_VERSION"
        log "installed in $(($(now_s) - t0)) s"
        echo "$(($(now_s) - t0))" >"$LLMB_REAL_CACHE/sglang-install.seconds"
    fi
    write_stub
    nice "$VENV/bin/python" "$REAL_DIR/make_tiny_llama_hf.py" "$MODEL_DIR"
}

write_stub() {
    [[ -f "$STUB_DIR/libcuda.so.1" ]] && return 0
    command -v cc >/dev/null || die "a C compiler (cc) is needed to build the libcuda.so.1 stub"
    mkdir -p "$STUB_DIR"
    cat >"$STUB_DIR/cuda_stub.c" <<'EOF'
/* Stand-in for the NVIDIA driver library on a machine without a GPU: sglang-kernel links libcuda.so.1 for
   this one symbol. 100 is CUDA_ERROR_NO_DEVICE. */
int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr) { return 100; }
EOF
    cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$STUB_DIR/libcuda.so.1" "$STUB_DIR/cuda_stub.c" ||
        die "building the libcuda.so.1 stub failed"
    log "built $STUB_DIR/libcuda.so.1 (stub)"
}

start() {
    local port url extra=()
    if [[ ! -x "$VENV/bin/python" || ! -f "$STUB_DIR/libcuda.so.1" || ! -f "$MODEL_DIR/model.safetensors" ]]; then
        install
    fi
    port="$(pick_port)"
    url="http://127.0.0.1:$port"
    [[ "${SGLANG_INCREMENTAL:-0}" == "1" ]] && extra+=(--incremental-streaming-output)
    # shellcheck disable=SC2206 # SGLANG_ARGS is a list of words
    [[ -n "${SGLANG_ARGS:-}" ]] && extra+=(${SGLANG_ARGS})
    SGLANG_USE_CPU_ENGINE=1 LD_LIBRARY_PATH="$STUB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1 \
        start_server "$SERVER_NAME" "$port" nice "$VENV/bin/python" -m sglang.launch_server \
        --model-path "$MODEL_DIR" --served-model-name "$MODEL_NAME" --device cpu \
        --attention-backend torch_native --disable-cuda-graph --mem-fraction-static 0.5 \
        --max-total-tokens 16384 --chunked-prefill-size 512 --host 127.0.0.1 --port "$port" \
        --enable-metrics --enable-cache-report "${extra[@]}"
    wait_ready "$SERVER_NAME" "$url" "${LLMB_READY_TIMEOUT:-300}" || { stop_server "$SERVER_NAME"; die "SGLang did not become ready"; }
    log "memory: $(server_rss_mb "$SERVER_NAME") MB RSS over the server's processes"
    echo "$url"
}

# server_rss_mb NAME: total RSS of the server's process group, in MB.
server_rss_mb() {
    local pid
    pid="$(server_pid "$1")"
    [[ -n "$pid" ]] || { echo 0; return; }
    ps -o rss= -g "$pid" | awk '{s += $1} END {printf "%d", s / 1024}'
}

server_text() {
    local mode="cumulative streaming (default)"
    [[ "${SGLANG_INCREMENTAL:-0}" == "1" ]] && mode="--incremental-streaming-output"
    echo "SGLang $SGLANG_VERSION (PyPI wheel on CPU: SGLANG_USE_CPU_ENGINE=1, --device cpu --attention-backend torch_native, libcuda stub, --enable-metrics --enable-cache-report, $mode), model $MODEL_NAME (tiny random Llama: hidden 256, 2 layers, vocab 4096, local byte-level BPE tokenizer)"
}

record() {
    local url
    if [[ -n "${LLMB_URL:-}" ]]; then
        url="$LLMB_URL"
        "$REAL_DIR/record_cases.sh" sglang "$url" "$(server_text)" "$@"
        return
    fi
    stop_on_exit "$SERVER_NAME"
    url="$(start)"
    "$REAL_DIR/record_cases.sh" sglang "$url" "$(server_text)" "$@"
    stop_server "$SERVER_NAME"
    # The incremental cases need a server started with --incremental-streaming-output.
    if [[ $# -eq 0 ]]; then
        export SGLANG_INCREMENTAL=1
        url="$(start)"
        "$REAL_DIR/record_cases.sh" sglang "$url" "$(server_text)" native_incremental native_incremental_logprobs
        stop_server "$SERVER_NAME"
    fi
}

# The two-point method (the old two-request estimate) beside the streaming one: without --flush-cache the
# second request of each pair reuses the first one's prompt from SGLang's radix cache, so the point must be
# reported `cache-hit`; with --flush-cache it must not be. Then a short closed-loop load run.
run_two_point_and_load() {
    local name="$1" url="$2" model="$3" out rc=0 f
    out="$REPO_ROOT/target/real/$name"
    for f in two-point two-point-flush; do rm -f "$out/$f.jsonl" "$out/$f.jsonl.manifest.jsonl"; done
    rm -f "$out/load.jsonl" "$out/load.jsonl.manifest.jsonl"
    run_step "sweep --method two-point (no flush)" "$out/two-point.txt" \
        bench-client sweep --url "$url" --api sglang --contexts 1024,3000 --runs 2 \
        --method two-point --no-progress --out "$out/two-point.jsonl" || rc=1
    if ! grep -q cache-hit "$out/two-point.txt"; then
        log "FAILED: the two-point run without --flush-cache did not report cache-hit"
        rc=1
    fi
    run_step "sweep --method two-point --flush-cache" "$out/two-point-flush.txt" \
        bench-client sweep --url "$url" --api sglang --contexts 1024,3000 --runs 2 \
        --method two-point --flush-cache --no-progress --out "$out/two-point-flush.jsonl" || rc=1
    run_step "load --concurrency 4 --num-requests 16" "$out/load.txt" \
        bench-client load --url "$url" --api openai --model "$model" \
        --concurrency 4 --num-requests 16 --input-len 256 --output-len 32 --no-progress \
        --out "$out/load.jsonl" || rc=1
    return "$rc"
}

check() {
    local url out rc=0
    use_server
    url="$SERVER_URL"
    out="$REPO_ROOT/target/real/$SERVER_NAME"
    mkdir -p "$out"
    [[ -f "$RUN_DIR/$SERVER_NAME.ready_s" ]] && cp "$RUN_DIR/$SERVER_NAME.ready_s" "$out/ready_s.txt"
    run_rust_checks "$SERVER_NAME" "$url" "$MODEL_NAME" "${LLMB_CONTEXTS:-256,1024,3000}" sglang || rc=1
    run_two_point_and_load "$SERVER_NAME" "$url" "$MODEL_NAME" || rc=1
    run_step "conformance diff (the mock, set up from /server_info, against this server)" "$out/diff.txt" \
        conformance diff --real "$url" --hide-known || rc=1
    echo "$(server_rss_mb "$SERVER_NAME")" >"$out/rss_mb.txt"
    log "memory after the checks: $(cat "$out/rss_mb.txt") MB RSS; outputs in $out"
    return "$rc"
}

# The differential battery against a fresh server, its answers saved as the recording `cargo test`
# holds the mock against (default fixtures/diff/sglang-$SGLANG_VERSION; LLMB_DIFF_SAVE to change it).
# A fresh server, because the battery's prompts must not meet an earlier run's prefix cache.
diff_record() {
    local url save out
    save="${LLMB_DIFF_SAVE:-$REPO_ROOT/fixtures/diff/sglang-$SGLANG_VERSION}"
    out="$REPO_ROOT/target/real/$SERVER_NAME"
    mkdir -p "$out"
    use_server
    url="$SERVER_URL"
    rm -rf "$save"
    run_step "conformance diff --save $save" "$out/diff-record.txt" \
        conformance diff --real "$url" --save "$save" --hide-known
}

# Decisions on real SGLang (common.sh `run_decide`): outputs in target/real/sglang/decide/.
decide() {
    local url
    use_server
    url="$SERVER_URL"
    run_decide "$SERVER_NAME" "$url" sglang
}

# The twin check alone (common.sh `run_twin`): outputs in target/real/sglang/twin/, with the server's log.
twin() {
    local url rc=0
    use_server
    url="$SERVER_URL"
    run_twin "$SERVER_NAME" "$url" sglang || rc=1
    cp "$RUN_DIR/$SERVER_NAME.log" "$REPO_ROOT/target/real/$SERVER_NAME/twin/server.log" 2>/dev/null || true
    return "$rc"
}

# A production trace against SGLang: the first 300 requests of Mooncake's conversation trace
# (fixtures/traces/), lengths / 32 (16-token blocks, inputs within the tiny model's 4,096-token context),
# at the trace's own arrivals, with a KV pool that holds the whole slice (nothing evicted). Every request
# must be recorded, and the run's prefix-cache hit ratio must be within 5 points of what the trace's
# hash_ids predict for SGLang's page size (1 on this backend). Outputs in target/real/sglang/trace/.
trace() {
    local url out rc=0 line predicted served
    SGLANG_ARGS="${SGLANG_ARGS:-} --max-total-tokens 262144"
    use_server
    url="$SERVER_URL"
    out="$REPO_ROOT/target/real/$SERVER_NAME/trace"
    mkdir -p "$out"
    rm -f "$out/trace.jsonl" "$out/trace.jsonl.manifest.jsonl"
    run_step "load --trace (Mooncake conversation, 300 requests, lengths / 32)" "$out/trace.txt" \
        bench-client load --url "$url" --api sglang --trace fixtures/traces/mooncake-conversation-300.jsonl \
        --trace-scale 0.03125 --no-progress --out "$out/trace.jsonl" || rc=1
    [[ "$(wc -l <"$out/trace.jsonl")" == 300 ]] || { log "FAILED: $(wc -l <"$out/trace.jsonl") of 300 requests recorded"; rc=1; }
    line="$(grep '^prefix cache: the trace' "$out/trace.txt" || true)"
    predicted="$(sed -n 's/.*predict a hit ratio of \([0-9.]*\).*/\1/p' <<<"$line")"
    served="$(sed -n 's/.*this run: \([0-9.]*\)$/\1/p' <<<"$line")"
    if [[ -z "$predicted" || -z "$served" ]]; then
        log "FAILED: no hit ratios in $out/trace.txt"
        rc=1
    elif ! python3 -c "import sys; sys.exit(abs($predicted - $served) > 0.05)"; then
        log "FAILED: hit ratio $served, the trace predicts $predicted (more than 5 points apart)"
        rc=1
    else
        log "hit ratio $served, the trace predicts $predicted: within 5 points"
    fi
    cp "$RUN_DIR/$SERVER_NAME.log" "$out/server.log" 2>/dev/null || true
    return "$rc"
}

case "${1:-}" in
install) install ;;
trace) trace ;;
diff) diff_record ;;
decide) decide ;;
twin) twin ;;
start) start ;;
stop) stop_server "$SERVER_NAME" ;;
record) record "${@:2}" ;;
check) check ;;
*)
    echo "usage: $0 install|start|stop|record|diff|check|decide|twin|trace" >&2
    exit 2
    ;;
esac
