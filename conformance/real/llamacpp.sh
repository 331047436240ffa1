#!/usr/bin/env bash
# llama.cpp llama-server on loopback, with a tiny random GGUF Llama written at run time.
#
#   llamacpp.sh install   tools venv, llama-cpp-python sdist from PyPI, build llama-server (cached)
#   llamacpp.sh start     start llama-server in the background and wait for /health (prints the URL)
#   llamacpp.sh stop      stop it (kills the whole process group)
#   llamacpp.sh record    start, record transcripts into fixtures/streams/real/, stop
#   llamacpp.sh check     start, run `conformance --url` and a short `bench-client sweep`, stop
#
# Env: LLMB_REAL_CACHE, LLMB_PORT, LLMB_READY_TIMEOUT (default 120), LLMB_URL (record/check against a running
# server), LLAMACPP_PY_VERSION (default 0.3.36), LLAMACPP_SPEC=ngram|draft|none (speculative
# decoding: n-gram lookup (default), the same tiny model as draft model, or off).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SERVER_NAME=llamacpp
MODEL_NAME=tiny-llama
LLAMACPP_PY_VERSION="${LLAMACPP_PY_VERSION:-0.3.36}"
SRC_DIR="$LLMB_REAL_CACHE/src/llama_cpp_python-$LLAMACPP_PY_VERSION"
BUILD_DIR="$LLMB_REAL_CACHE/llamacpp-build-$LLAMACPP_PY_VERSION"
SERVER_BIN="$BUILD_DIR/bin/llama-server"
MODEL_FILE="$LLMB_REAL_CACHE/models/tiny-llama.gguf"
CTX=4096

install() {
    local t0 t1
    ensure_tools
    if [[ -x "$SERVER_BIN" ]]; then
        log "llama-server already built: $SERVER_BIN"
    else
        if [[ ! -d "$SRC_DIR/vendor/llama.cpp" ]]; then
            mkdir -p "$LLMB_REAL_CACHE/src"
            log "downloading llama-cpp-python==$LLAMACPP_PY_VERSION sdist from PyPI"
            "$TOOLS_VENV/bin/pip" download -q --no-deps --no-binary llama-cpp-python \
                "llama-cpp-python==$LLAMACPP_PY_VERSION" -d "$LLMB_REAL_CACHE/src"
            tar xzf "$LLMB_REAL_CACHE/src/llama_cpp_python-$LLAMACPP_PY_VERSION.tar.gz" -C "$LLMB_REAL_CACHE/src"
        fi
        t0="$(now_s)"
        log "configuring llama.cpp (vendor/llama.cpp of llama-cpp-python $LLAMACPP_PY_VERSION)"
        PATH="$TOOLS_VENV/bin:$PATH" nice -n 15 cmake -S "$SRC_DIR/vendor/llama.cpp" -B "$BUILD_DIR" -G Ninja \
            -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF \
            -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            >"$LLMB_REAL_CACHE/llamacpp-configure.log" 2>&1 ||
            { tail -n 30 "$LLMB_REAL_CACHE/llamacpp-configure.log" >&2; die "cmake configure failed"; }
        log "building llama-server (about 9 min on 2 cores; log: $LLMB_REAL_CACHE/llamacpp-build.log)"
        PATH="$TOOLS_VENV/bin:$PATH" nice -n 15 cmake --build "$BUILD_DIR" --target llama-server \
            -j "$(nproc)" >"$LLMB_REAL_CACHE/llamacpp-build.log" 2>&1 ||
            { tail -n 30 "$LLMB_REAL_CACHE/llamacpp-build.log" >&2; die "build failed"; }
        t1="$(now_s)"
        log "built $SERVER_BIN in $((t1 - t0)) s"
        echo "$((t1 - t0))" >"$LLMB_REAL_CACHE/llamacpp-build.seconds"
    fi
    if [[ ! -f "$MODEL_FILE" ]]; then
        mkdir -p "$(dirname "$MODEL_FILE")"
        "$TOOLS_VENV/bin/python" "$REAL_DIR/make_tiny_gguf.py" "$MODEL_FILE"
    fi
}

start() {
    local port url extra=()
    [[ -x "$SERVER_BIN" && -f "$MODEL_FILE" ]] || install
    port="$(pick_port)"
    url="http://127.0.0.1:$port"
    # Speculative decoding, like the vLLM setup: n-gram lookup by default (no draft model), or the same tiny
    # model as a draft model (every draft accepted), or none.
    case "${LLAMACPP_SPEC:-ngram}" in
    ngram) extra+=(--spec-type ngram-simple --spec-ngram-simple-size-n 2 --spec-ngram-simple-size-m 4) ;;
    draft) extra+=(--spec-type draft-simple --spec-draft-model "$MODEL_FILE" --spec-draft-n-max 4) ;;
    none) ;;
    *) die "LLAMACPP_SPEC must be ngram, draft or none" ;;
    esac
    # One slot, so every request shares one KV cache and a repeated prompt hits the prompt cache.
    start_server "$SERVER_NAME" "$port" "$SERVER_BIN" --model "$MODEL_FILE" --alias "$MODEL_NAME" \
        --host 127.0.0.1 --port "$port" --ctx-size "$CTX" --parallel 1 --threads 2 --metrics \
        --cache-prompt "${extra[@]}"
    wait_ready "$SERVER_NAME" "$url" "${LLMB_READY_TIMEOUT:-120}" || { stop_server "$SERVER_NAME"; die "llama-server did not become ready"; }
    echo "$url"
}

version() {
    "$SERVER_BIN" --version 2>&1 | grep -m1 -i version || echo "unknown"
}

record() {
    local url
    use_server
    url="$SERVER_URL"
    "$REAL_DIR/record_cases.sh" llamacpp "$url" "llama.cpp llama-server $(version) (llama-cpp-python $LLAMACPP_PY_VERSION sdist vendor/llama.cpp), model $MODEL_NAME (random GGUF), speculative ${LLAMACPP_SPEC:-ngram}" "$@"
}

check() {
    local url
    use_server
    url="$SERVER_URL"
    # llama.cpp answers malformed JSON with HTTP 500, not 4xx: a known difference, listed in docs/real-servers.md.
    LLMB_ALLOW_FAIL="${LLMB_ALLOW_FAIL-error-malformed-json}" \
        run_rust_checks "$SERVER_NAME" "$url" "$MODEL_NAME" "${LLMB_CONTEXTS:-512,1024,2048,3072}"
}

case "${1:-}" in
install) install ;;
start) start ;;
stop) stop_server "$SERVER_NAME" ;;
record) record "${@:2}" ;;
check) check ;;
*)
    echo "usage: $0 install|start|stop|record|check" >&2
    exit 2
    ;;
esac
