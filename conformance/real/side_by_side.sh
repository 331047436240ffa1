#!/usr/bin/env bash
# Side by side on one mock configuration: bench-client load, SGLang's bench_serving and guidellm
# (0.8's `guidellm run`; OpenAI dialect only), each against a fresh mock-server release binary,
# printing each tool's CPU seconds per million streamed tokens and its mean TTFT overhead over the
# mock's ground truth (`/debug/ttft`: socket arrival to the hand-off of the first chunk). Not part
# of `cargo test`.
#
#   conformance/real/side_by_side.sh            # every concurrency x dialect x tool
#   SBS_CONC="64" SBS_DIALECTS=sglang conformance/real/side_by_side.sh
#
# Env (all optional): SBS_REQUESTS (2000), SBS_INPUT (1024), SBS_OUTPUT (128), SBS_CONC ("64 1000"),
# SBS_DIALECTS ("sglang openai"), SBS_TOOLS ("bench-client bench_serving"; add guidellm for its
# row: guidellm 0.8.1 from PyPI, installed into its own venv on first use, runs
# a "concurrent" profile of SBS_CONC streams for SBS_REQUESTS streamed /v1/completions requests,
# synthetic prompts of SBS_INPUT tokens of the local tiny tokenizer, HF_HUB_OFFLINE=1),
# SBS_MOCK_ARGS (extra mock-server flags), LLMB_BIN_DIR (mock-server and bench-client binaries; else
# `cargo build --release`), SGLANG_VERSION (0.5.23; `sglang.sh install` installs it), SBS_OUT
# (working directory, default a new temporary one), and those of common.sh.
#
# CPU is user + system time of the tool's process tree (`/usr/bin/time`), start-up included;
# bench_serving's and guidellm's Python start-up (importing it once, measured apart) is also shown
# subtracted (guidellm's worker processes start up too, and that stays in). Tokens
# are those the mock streamed (its ground truth), so every tool is divided by the same count.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SERVER_NAME=side-by-side
SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
SGLANG_VENV="$LLMB_REAL_CACHE/sglang-venv-$SGLANG_VERSION"
GUIDELLM_VENV="$LLMB_REAL_CACHE/guidellm-venv"
TOKENIZER_DIR="$LLMB_REAL_CACHE/models/tiny-llama-sglang-hf"
STUB_DIR="$LLMB_REAL_CACHE/libcuda-stub"
REQUESTS="${SBS_REQUESTS:-2000}"
INPUT="${SBS_INPUT:-1024}"
OUTPUT="${SBS_OUTPUT:-128}"
CONCS="${SBS_CONC:-64 1000}"
DIALECTS="${SBS_DIALECTS:-sglang openai}"
TOOLS="${SBS_TOOLS:-bench-client bench_serving}"
WORK="${SBS_OUT:-$(mktemp -d /tmp/side-by-side.XXXXXX)}"
mkdir -p "$WORK"

if [[ -n "${LLMB_BIN_DIR:-}" ]]; then
    BIN="$LLMB_BIN_DIR"
else
    log "building the release binaries"
    (cd "$REPO_ROOT" && cargo build -q --release -p mock-server -p bench-client)
    BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release"
fi

if [[ ! -x "$SGLANG_VENV/bin/python" ]]; then
    log "no SGLang venv: installing it with sglang.sh install"
    "$REAL_DIR/sglang.sh" install
fi
if [[ ! -f "$TOKENIZER_DIR/tokenizer.json" ]]; then
    log "writing the tiny tokenizer and model"
    "$REAL_DIR/sglang.sh" install
fi
if [[ " $TOOLS " == *" guidellm "* ]] && ! "$GUIDELLM_VENV/bin/guidellm" --help >/dev/null 2>&1; then
    ensure_tools
    log "installing guidellm from PyPI into $GUIDELLM_VENV"
    if ! { "$TOOLS_VENV/bin/uv" venv -q -p 3.11 "$GUIDELLM_VENV" &&
        VIRTUAL_ENV="$GUIDELLM_VENV" nice -n 15 "$TOOLS_VENV/bin/uv" pip install -q guidellm==0.8.1; }; then
        log "guidellm did not install; it is left out"
        TOOLS="${TOOLS/guidellm/}"
    fi
fi
export LD_LIBRARY_PATH="$STUB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

MOCK_PID=""
stop_mock() {
    if [[ -n "$MOCK_PID" ]]; then
        kill "$MOCK_PID" 2>/dev/null || true
        wait "$MOCK_PID" 2>/dev/null || true
        MOCK_PID=""
    fi
}
trap stop_mock EXIT

# A fresh mock for each run, so its ground truth holds that run's requests only.
start_mock() {
    local port max
    port="$(pick_port)"
    max=$((${1} > 64 ? ${1} : 64))
    # shellcheck disable=SC2086
    # /debug/ttft lists the requests whose ground truth the mock keeps: every one of the run.
    "$BIN/mock-server" --port "$port" --debug-endpoints --max-running-requests "$max" \
        --truth-window "$((REQUESTS > 4096 ? REQUESTS : 4096))" \
        --served-model-name tiny-llama ${SBS_MOCK_ARGS:-} >"$WORK/mock.log" 2>&1 &
    MOCK_PID=$!
    URL="http://127.0.0.1:$port"
    for _ in $(seq 1 200); do
        curl -sf "$URL/health" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    die "mock-server did not come up (see $WORK/mock.log)"
}

# mock_cpu: user + system seconds the running mock has used so far.
mock_cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f", ($14 + $15) / hz}' "/proc/$MOCK_PID/stat"; }

# cpu_of FILE: user + system seconds that /usr/bin/time -f '%U %S' wrote on the last line.
cpu_of() { tail -n 1 "$1" | awk '{printf "%.3f", $1 + $2}'; }

# One row: tool dialect conc cpu_s mean_ttft_ms [note]. Reads the mock's truth for tokens and TTFT.
row() {
    local tool="$1" dialect="$2" conc="$3" cpu="$4" ttft="$5" note="${6:-}"
    curl -sf "$URL/debug/ttft" >"$WORK/truth.json"
    python3 - "$WORK/truth.json" "$REQUESTS" "$tool" "$dialect" "$conc" "$cpu" "$ttft" "$note" <<'EOF'
import json, sys
truth, n, tool, dialect, conc, cpu, ttft, note = sys.argv[1:]
rows = json.load(open(truth))[-int(n):]  # the run's requests (a warm-up comes first)
tokens = sum(r["completion_tokens"] for r in rows)
true_ttft = sum(r["ttft_ns"] for r in rows) / len(rows) / 1e6
cpu, ttft = float(cpu), float(ttft)
per_m = cpu / tokens * 1e6 if tokens else float("nan")
print(f"| {tool} | {dialect} | {conc} | {len(rows)} | {tokens} | {cpu:.2f} | {per_m:.2f} | "
      f"{ttft:.3f} | {true_ttft:.3f} | {ttft - true_ttft:+.3f} | {note} |")
EOF
}

run_bench_client() {
    local dialect="$1" conc="$2" out="$WORK/bc-$1-$2.jsonl"
    rm -f "$out" "$out".manifest.jsonl
    /usr/bin/time -f '%U %S' -o "$WORK/time" "$BIN/bench-client" load --url "$URL" --api "$dialect" \
        --model tiny-llama --num-requests "$REQUESTS" --concurrency "$conc" --input-len "$INPUT" \
        --output-len "$OUTPUT" --out "$out" >"$WORK/bc.log" 2>&1 || die "bench-client failed: $(tail -5 "$WORK/bc.log")"
    local ttft events
    read -r ttft events < <(python3 - "$out" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
t = [r["ttft_ms"] for r in recs if r["ttft_ms"] is not None]
ev = sum(len(r["trace"]["chunks"]["at_ns"]) for r in recs)
print(sum(t) / len(t), ev)
EOF
)
    local cpu mock
    cpu="$(cpu_of "$WORK/time")"
    mock="$(mock_cpu)"
    row bench-client "$dialect" "$conc" "$cpu" "$ttft" \
        "$(python3 -c "print(f'client {$cpu / $events * 1e6:.2f} us/event over {$events} events; mock {$mock / $events * 1e6:.2f} us/event; record $(($(stat -c %s "$out") / REQUESTS)) B')")"
}

# CPU seconds of importing module $2 with Python $1: the tool's Python start-up, taken off its row.
import_cpu() {
    HF_HUB_OFFLINE=1 /usr/bin/time -f '%U %S' -o "$WORK/time" "$1" -c "import $2" >/dev/null 2>&1
    cpu_of "$WORK/time"
}

BS_IMPORT_CPU=""
run_bench_serving() {
    local dialect="$1" conc="$2" backend out="$WORK/bs-$1-$2.json"
    backend=sglang
    [[ "$dialect" == openai ]] && backend=sglang-oai
    if [[ -z "$BS_IMPORT_CPU" ]]; then
        BS_IMPORT_CPU="$(import_cpu "$SGLANG_VENV/bin/python" sglang.benchmark.serving)"
    fi
    rm -f "$out"
    /usr/bin/time -f '%U %S' -o "$WORK/time" "$SGLANG_VENV/bin/python" -m sglang.bench_serving \
        --backend "$backend" --base-url "$URL" --model tiny-llama --tokenizer "$TOKENIZER_DIR" \
        --dataset-name random-ids --random-input-len "$INPUT" --random-output-len "$OUTPUT" \
        --random-range-ratio 1 --num-prompts "$REQUESTS" --max-concurrency "$conc" --request-rate inf \
        --disable-tqdm --output-file "$out" >"$WORK/bs.log" 2>&1 || die "bench_serving failed: $(tail -5 "$WORK/bs.log")"
    local ttft cpu
    ttft="$(python3 -c "import json; print(json.loads(open('$out').read().splitlines()[-1])['mean_ttft_ms'])")"
    cpu="$(cpu_of "$WORK/time")"
    row bench_serving "$dialect" "$conc" "$cpu" "$ttft" \
        "$(python3 -c "print(f'{$cpu - $BS_IMPORT_CPU:.2f} s without its {$BS_IMPORT_CPU:.2f} s Python start-up')")"
}

# guidellm 0.8's `guidellm run`: a "concurrent" profile of $conc streams stopped after $REQUESTS
# requests, synthetic prompts of $INPUT tokens of the local tokenizer (nothing from the Hugging
# Face hub), streamed on /v1/completions as bench_serving's sglang-oai backend does. With
# output_tokens set, guidellm sends max_tokens with ignore_eos true, as
# bench_serving sends ignore_eos, so the mock streams exactly $OUTPUT tokens a request. guidellm
# spawns min(conc, 10) worker processes; /usr/bin/time counts them all.
GL_IMPORT_CPU=""
run_guidellm() {
    local dialect="$1" conc="$2" out="$WORK/gl-$1-$2.json"
    if [[ "$dialect" != openai ]]; then
        return 0 # guidellm speaks the OpenAI API only
    fi
    if [[ -z "$GL_IMPORT_CPU" ]]; then
        GL_IMPORT_CPU="$(import_cpu "$GUIDELLM_VENV/bin/python" guidellm.benchmark.entrypoints)"
    fi
    rm -f "$out"
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 /usr/bin/time -f '%U %S' -o "$WORK/time" \
        "$GUIDELLM_VENV/bin/guidellm" run \
        --backend "kind=openai_http,target=$URL,model=tiny-llama,request_format=/v1/completions,stream=true" \
        --tokenizer "kind=huggingface_auto,model=$TOKENIZER_DIR" \
        --profile "kind=concurrent,streams=$conc" \
        --constraint "kind=max_requests,count=$REQUESTS" \
        --data "kind=synthetic_text,prompt_tokens=$INPUT,output_tokens=$OUTPUT" \
        --output "kind=json,path=$out" \
        --disable-console-interactive >"$WORK/gl.log" 2>&1 ||
        { log "guidellm failed: $(tail -5 "$WORK/gl.log")"; return 0; }
    local ttft prompt cpu
    read -r ttft prompt < <(python3 - "$out" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))["benchmarks"][0]["metrics"]
print(m["time_to_first_token_ms"]["successful"]["mean"], m["prompt_token_count"]["successful"]["mean"])
EOF
) || { log "no mean TTFT in $out"; return 0; }
    cpu="$(cpu_of "$WORK/time")"
    row guidellm "$dialect" "$conc" "$cpu" "$ttft" \
        "$(python3 -c "print(f'{$cpu - $GL_IMPORT_CPU:.2f} s without one {$GL_IMPORT_CPU:.2f} s Python start-up; $INPUT-token prompts are {$prompt:.0f} mock tokens')")"
}

log "mock-server $("$BIN/mock-server" --version 2>/dev/null || true); $REQUESTS requests, $INPUT in / $OUTPUT out; work dir $WORK"
echo "| tool | dialect | concurrency | requests | tokens (mock) | CPU s | CPU s per M tokens | mean TTFT ms | true mean TTFT ms | overhead ms | note |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for conc in $CONCS; do
    for dialect in $DIALECTS; do
        for tool in $TOOLS; do
            start_mock "$conc"
            case "$tool" in
                bench-client) run_bench_client "$dialect" "$conc" ;;
                bench_serving) run_bench_serving "$dialect" "$conc" ;;
                guidellm) run_guidellm "$dialect" "$conc" ;;
            esac
            stop_mock
        done
    done
done
