#!/usr/bin/env bash
# Record the standard set of cases from a running server into fixtures/streams/real/<server>_<case>.json.
# Called by `vllm.sh record`, `llamacpp.sh record` and `sglang.sh record`; usable directly:
#   record_cases.sh vllm|llamacpp|sglang URL "SERVER AND VERSION TEXT" [CASE...]
# SGLang also gets its native /generate cases (native_*), 400s of /v1/completions and its info endpoints
# (info_*, GET); `bad_token_id` is not in its default set, because it kills SGLang's scheduler.
# Prompts are token-id lists (ids in [100, 4000)), each case its own seed so that no case hits the prefix
# cache of another, except `prefix_cache_repeat`, which sends one prompt twice and records the second.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SERVER_NAME="$1"
URL="$2"
SERVER_TEXT="$3"
shift 3
ONLY=("$@")
OUT_DIR="${LLMB_FIXTURES_OUT:-$REPO_ROOT/fixtures/streams/real}"
MODEL=tiny-llama
PROMPT_LEN="${LLMB_PROMPT_LEN:-300}"
mkdir -p "$OUT_DIR"
FAILED=()

wanted() {
    [[ ${#ONLY[@]} -eq 0 ]] && return 0
    local c
    for c in "${ONLY[@]}"; do [[ "$c" == "$1" ]] && return 0; done
    return 1
}

# body SEED_OR_IDS EXTRA_JSON: a completions body; EXTRA_JSON fields are merged over the defaults.
body() {
    python3 -c '
import json, sys
ids, extra = json.loads(sys.argv[1]), json.loads(sys.argv[2])
b = {"model": sys.argv[3], "prompt": ids, "max_tokens": 16, "temperature": 0, "ignore_eos": True, "stream": True}
b.update(extra)
print(json.dumps(b))
' "$1" "$2" "$MODEL"
}

# native SEED_OR_IDS EXTRA_JSON [SAMPLING_EXTRA_JSON]: an SGLang native /generate body (input_ids).
native() {
    python3 -c '
import json, sys
ids, extra, samp = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
s = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
s.update(samp)
b = {"input_ids": ids, "sampling_params": s, "stream": True}
b.update(extra)
print(json.dumps(b))
' "$1" "$2" "${3:-"{}"}"
}

# rec CASE DESCRIPTION BODY [PATH] [DIALECT]
rec() {
    local name="$1" desc="$2" b="$3" path="${4:-/v1/completions}" dialect="${5:-openai}"
    local out="$OUT_DIR/${SERVER_NAME}_${name}.json"
    if ! python3 "$REAL_DIR/record.py" --url "$URL" --path "$path" --body "$b" --server "$SERVER_TEXT" \
        --description "$SERVER_NAME: $desc${ATTEMPT_NOTE:-}" --dialect "$dialect" --out "$out"; then
        FAILED+=("$name")
    fi
}

# rec_get CASE DESCRIPTION PATH [DIALECT]: a GET of an info endpoint.
rec_get() {
    local name="$1" desc="$2" path="$3" dialect="${4:-sglang}"
    if ! python3 "$REAL_DIR/record.py" --url "$URL" --method GET --path "$path" --server "$SERVER_TEXT" \
        --description "$SERVER_NAME: $desc" --dialect "$dialect" --out "$OUT_DIR/${SERVER_NAME}_${name}.json"; then
        FAILED+=("$name")
    fi
}

# The cases a server gets when none are named.
if [[ ${#ONLY[@]} -eq 0 && "$SERVER_NAME" == sglang ]]; then
    ONLY=(plain include_usage continuous_usage prefix_cache_repeat bad_request too_long_prompt chat
        native_cumulative native_logprobs native_plain_json native_cache_repeat native_bad_max_new_tokens
        native_too_long_prompt max_tokens_zero max_tokens_zero_plain bad_temperature
        info_get_model_info info_server_info info_v1_models info_metrics)
fi

# LLMB_SEED shifts every seed, for a re-recording that must not hit the cache of an earlier run.
SEED_BASE="${LLMB_SEED:-0}"
ATTEMPT_NOTE=""
if ((${LLMB_ATTEMPT:-1} > 1)); then
    ATTEMPT_NOTE=" (attempt ${LLMB_ATTEMPT}: earlier attempts came in fewer than 3 socket reads)"
fi
ids() { prompt_ids "$PROMPT_LEN" "$((SEED_BASE + $1))"; }

# One unrecorded warm-up request: the first request after start pays one-time costs (vLLM compiles, caches).
python3 "$REAL_DIR/record.py" --url "$URL" --body "$(body "$(prompt_ids "$PROMPT_LEN" 99)" '{}')" \
    --server "$SERVER_TEXT" --description warmup --out "$RUN_DIR/${SERVER_NAME}_warmup.json" ||
    die "warm-up request to $URL failed"

if wanted plain; then
    rec plain "plain stream, no stream_options; shows where finish_reason sits and whether usage comes unasked" \
        "$(body "$(ids 1)" '{}')"
fi
if wanted include_usage; then
    rec include_usage "stream_options.include_usage: the usage chunk (cached-token details if any)" \
        "$(body "$(ids 2)" '{"stream_options":{"include_usage":true}}')"
fi
if wanted continuous_usage; then
    rec continuous_usage "stream_options.continuous_usage_stats: usage on every chunk" \
        "$(body "$(ids 3)" '{"stream_options":{"include_usage":true,"continuous_usage_stats":true}}')"
fi
if wanted token_ids; then
    if [[ "$SERVER_NAME" == vllm ]]; then
        rec token_ids "return_token_ids: token ids per chunk (chunk text is empty under --skip-tokenizer-init)" \
            "$(body "$(ids 4)" '{"return_token_ids":true,"stream_options":{"include_usage":true}}')"
    else
        rec token_ids "return_tokens (llama.cpp's field): token ids per chunk" \
            "$(body "$(ids 4)" '{"return_tokens":true,"stream_options":{"include_usage":true}}')"
    fi
fi
if wanted prefix_cache_repeat; then
    p="$(ids 5)"
    b="$(body "$p" '{"stream_options":{"include_usage":true}}')"
    python3 "$REAL_DIR/record.py" --url "$URL" --body "$b" --server "$SERVER_TEXT" --description warmup \
        --out "$RUN_DIR/${SERVER_NAME}_prefix_first.json" || FAILED+=(prefix_cache_repeat_first)
    rec prefix_cache_repeat "the second of two identical requests (include_usage): cached prompt tokens" "$b"
fi
if wanted speculative; then
    extra='{"max_tokens":32,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}'
    [[ "$SERVER_NAME" == vllm ]] && extra='{"max_tokens":32,"return_token_ids":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}'
    [[ "$SERVER_NAME" == llamacpp ]] && extra='{"max_tokens":32,"return_tokens":true,"stream_options":{"include_usage":true}}'
    rec speculative "repetitive prompt under speculative decoding: chunks carrying several tokens" \
        "$(body "$(repetitive_ids "$PROMPT_LEN" "$SEED_BASE")" "$extra")"
fi
if wanted bad_request; then
    if [[ "$SERVER_NAME" == llamacpp ]]; then
        # llama.cpp does not reject max_tokens > context: it streams until the context is full. A 4000-id
        # prompt keeps that stream short.
        rec bad_request "max_tokens 100000 with a 4000-id prompt (context 4096): not rejected; generation stops when the context is full" \
            "$(body "$(prompt_ids 4000 7)" '{"max_tokens":100000,"stream_options":{"include_usage":true}}')"
    else
        rec bad_request "max_tokens beyond the context length: HTTP error before any stream" \
            "$(body "$(ids 7)" '{"max_tokens":100000}')"
    fi
fi
if wanted too_long_prompt; then
    rec too_long_prompt "a prompt longer than the context (5000 ids): error shape" \
        "$(body "$(prompt_ids 5000 8)" '{}')"
fi
if wanted chat; then
    rec chat "/v1/chat/completions without a chat template" \
        '{"model":"tiny-llama","messages":[{"role":"user","content":"hello there"}],"max_tokens":16,"temperature":0,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}' \
        /v1/chat/completions openai-chat
fi

# SGLang's native API (/generate with input_ids).
if wanted native_cumulative; then
    rec native_cumulative "native /generate streamed, cumulative (the default): each event carries all text so far and meta_info" \
        "$(native "$(ids 11)" '{}')" /generate sglang
fi
if wanted native_incremental; then
    rec native_incremental "native /generate streamed on a server started with --incremental-streaming-output: each event carries only the new text" \
        "$(native "$(ids 12)" '{}')" /generate sglang
fi
if wanted native_logprobs; then
    rec native_logprobs "native /generate streamed with return_logprob: output_token_logprobs in meta_info" \
        "$(native "$(ids 13)" '{"return_logprob":true}')" /generate sglang
fi
if wanted native_incremental_logprobs; then
    rec native_incremental_logprobs "native /generate streamed with return_logprob on a server started with --incremental-streaming-output" \
        "$(native "$(ids 14)" '{"return_logprob":true}')" /generate sglang
fi
if wanted native_plain_json; then
    rec native_plain_json "native /generate not streamed: one JSON object (text, output_ids, meta_info)" \
        "$(native "$(ids 15)" '{"stream":false}')" /generate sglang
fi
if wanted native_cache_repeat; then
    p="$(ids 16)"
    b="$(native "$p" '{}')"
    python3 "$REAL_DIR/record.py" --url "$URL" --path /generate --body "$b" --server "$SERVER_TEXT" \
        --description warmup --dialect sglang --out "$RUN_DIR/${SERVER_NAME}_native_cache_first.json" ||
        FAILED+=(native_cache_repeat_first)
    rec native_cache_repeat "the second of two identical native /generate requests: meta_info.cached_tokens is prompt - 1" \
        "$b" /generate sglang
fi
if wanted native_bad_max_new_tokens; then
    rec native_bad_max_new_tokens "native /generate streamed with max_new_tokens -1: HTTP 200, then an in-band error event and [DONE]" \
        "$(native "$(ids 17)" '{}' '{"max_new_tokens":-1}')" /generate sglang
fi
if wanted native_too_long_prompt; then
    rec native_too_long_prompt "native /generate streamed with a prompt longer than the context (5000 ids, context 4096): HTTP 200, then an in-band error event and [DONE]" \
        "$(native "$(prompt_ids 5000 18)" '{}')" /generate sglang
fi
if wanted max_tokens_zero; then
    rec max_tokens_zero "/v1/completions streamed with max_tokens 0: rejected with a 400 before any stream" \
        "$(body "$(ids 19)" '{"max_tokens":0}')"
fi
if wanted max_tokens_zero_plain; then
    rec max_tokens_zero_plain "/v1/completions not streamed with max_tokens 0: rejected with a 400" \
        "$(body "$(ids 20)" '{"max_tokens":0,"stream":false}')"
fi
if wanted bad_temperature; then
    rec bad_temperature "/v1/completions streamed with temperature -1: rejected with a 400" \
        "$(body "$(ids 21)" '{"temperature":-1}')"
fi
if wanted info_get_model_info; then rec_get info_get_model_info "GET /get_model_info" /get_model_info; fi
if wanted info_server_info; then rec_get info_server_info "GET /server_info (server args and internal state)" /server_info; fi
if wanted info_v1_models; then rec_get info_v1_models "GET /v1/models" /v1/models openai; fi
if wanted info_metrics; then rec_get info_metrics "GET /metrics (Prometheus text, --enable-metrics)" /metrics; fi

# Last on purpose: on vLLM 0.32.0 (CPU) this kills the engine: HTTP 200, one in-stream error event, [DONE],
# and the whole server exits.
if wanted bad_token_id; then
    desc="a prompt token id outside the vocabulary (4096): error shape"
    [[ "$SERVER_NAME" == vllm ]] && desc="in-stream error: a prompt token id outside the vocabulary (999999 >= 4096) passes validation, the engine core crashes, the stream (HTTP 200) carries one error event and [DONE]; the server then exits"
    rec bad_token_id "$desc" "$(body "[100, 200, 999999]" '{}')"
fi

if [[ ${#FAILED[@]} -gt 0 ]]; then
    die "cases that could not be recorded: ${FAILED[*]}"
fi

# On 2 busy cores the server's HTTP process is sometimes starved while the engine decodes, and a whole
# stream arrives in one socket read. Such a transcript is real but says nothing about inter-chunk timing,
# so a streaming case that came in fewer than 3 reads is recorded again (fresh seeds, so no cache hit),
# up to LLMB_ATTEMPTS times in all; the description of a retried file says which attempt it is.
ATTEMPT="${LLMB_ATTEMPT:-1}"
if ((ATTEMPT < ${LLMB_ATTEMPTS:-4})); then
    RETRY=()
    for c in plain include_usage continuous_usage token_ids prefix_cache_repeat speculative native_cumulative \
        native_incremental native_logprobs native_incremental_logprobs native_cache_repeat; do
        f="$OUT_DIR/${SERVER_NAME}_${c}.json"
        if ! wanted "$c" || [[ ! -f "$f" ]]; then continue; fi
        if python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); sys.exit(0 if t["status"]==200 and len(t["reads"])<3 else 1)' "$f"; then
            RETRY+=("$c")
        fi
    done
    if [[ ${#RETRY[@]} -gt 0 ]]; then
        log "attempt $ATTEMPT: ${RETRY[*]} arrived in fewer than 3 reads; recording them again"
        LLMB_ATTEMPT=$((ATTEMPT + 1)) LLMB_SEED=$((SEED_BASE + 1000)) \
            "$REAL_DIR/record_cases.sh" "$SERVER_NAME" "$URL" "$SERVER_TEXT" "${RETRY[@]}"
        exit $?
    fi
fi
log "transcripts in $OUT_DIR"
