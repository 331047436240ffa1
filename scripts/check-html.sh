#!/usr/bin/env bash
# The HTML reports as a person sees them: a sweep, a load run with an SLO, the Kimi sweep (1k..185k)
# and a compare of two sweeps against the embedded mock (`report --html`, `compare --html`), and a
# capacity search's plot with its SLO, and a compare of an imported bench_serving summary (the fixture)
# against a load of this client with the mock's ground truth beside both, each loaded in headless Chromium. Fails when a
# page logs a console message, refers to anything outside itself, or lacks its tables and plots. Screenshots and the rendered DOM
# go to target/html-check/ to look at.
#   scripts/check-html.sh            (BENCH_CLIENT=path picks the binary; default target/debug)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BENCH_CLIENT:-target/debug/bench-client}"
CHROMIUM="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$CHROMIUM" ]]; then
    echo "check-html: chromium is not installed (apt-get install chromium)" >&2
    exit 3
fi
[[ -x "$BIN" ]] || cargo build -p bench-client
OUT=target/html-check
rm -rf "$OUT"
mkdir -p "$OUT"
"$BIN" sweep --contexts 1k,4k,16k --runs 2 --warmup 0 --output-tokens 16 --out "$OUT/sweep.jsonl" --no-progress >/dev/null 2>"$OUT/sweep.log"
"$BIN" sweep --contexts 1k,4k,16k --runs 2 --warmup 0 --output-tokens 16 --mock-set decode_base_s=0.0024 \
    --out "$OUT/sweep-new.jsonl" --no-progress >/dev/null 2>"$OUT/sweep-new.log"
# The load runs on the engine path: exact virtual time, so the compare of a slower decode is worse in
# every row it can judge, whatever else the machine does.
"$BIN" load --simulate --concurrency 4 --num-requests 40 --input-len 512 --output-len 32 --slo ttft=200,tpot=20 \
    --out "$OUT/load.jsonl" --no-progress >/dev/null 2>"$OUT/load.log"
# The Kimi story's sweep (1k..185k, TTFT over two decades) and a capacity search with its SLO, on the
# engine path (virtual time: milliseconds to seconds of wall time).
"$BIN" sweep --simulate --preset kimi-k2.6-dflash-8xrtx-pro-6000 --mock-set mem_fraction_static=0.93 \
    --mock-set chunked_prefill_size=4096 --mock-set expandable_segments=true \
    --contexts 1k,2k,4k,8k,16k,32k,64k,128k,185k --runs 2 --warmup 0 --output-tokens 16 \
    --out "$OUT/kimi.jsonl" --no-progress >/dev/null 2>"$OUT/kimi.log"
mkdir -p "$OUT/capacity"
"$BIN" capacity --simulate --slo ttft=5,tpot=2 --num-requests 100 --input-len 1024 --output-len 128 \
    --out "$OUT/capacity/step" --plot "$OUT/capacity.svg" >/dev/null 2>"$OUT/capacity.log"
"$BIN" load --simulate --concurrency 4 --num-requests 40 --input-len 512 --output-len 32 --slo ttft=200,tpot=20 --mock-set decode_base_s=0.0024 \
    --out "$OUT/load-new.jsonl" --no-progress >/dev/null 2>"$OUT/load-new.log"
# An imported tool's summary against this client's run of the embedded mock reporting its timings: the
# page puts the mock's ground truth beside both.
"$BIN" import fixtures/import/bench_serving-summary.jsonl --out "$OUT/imported-summary.jsonl" >"$OUT/import.log" 2>&1
"$BIN" load --api sglang --concurrency 2 --num-requests 8 --input-len 64 --output-len 16 --mock-set time_scale=0.25 \
    --mock-set enable_metrics=true --out "$OUT/load-truth.jsonl" --no-progress >/dev/null 2>"$OUT/load-truth.log"

fail=0
check() { # check PAGE WHAT GREP-PATTERN: the rendered DOM of PAGE must match the pattern
    if ! grep -qE "$3" "$OUT/$1.dom"; then
        echo "check-html: $1.html has no $2" >&2
        fail=1
    fi
}
"$BIN" compare "$OUT/sweep.jsonl" "$OUT/sweep-new.jsonl" --html "$OUT/compare.html" >/dev/null 2>"$OUT/compare.log"
"$BIN" compare "$OUT/load.jsonl" "$OUT/load-new.jsonl" --html "$OUT/compare-load.html" >/dev/null 2>"$OUT/compare-load.log"
"$BIN" compare "$OUT/imported-summary.jsonl" "$OUT/load-truth.jsonl" --html "$OUT/compare-truth.html" >/dev/null 2>"$OUT/compare-truth.log"
for page in sweep load kimi compare compare-load compare-truth; do
    if [[ "$page" != compare* ]]; then
        "$BIN" report "$OUT/$page.jsonl" --html "$OUT/$page.html" >/dev/null 2>>"$OUT/$page.log"
    fi
    if grep -qiE '(src|href)=|@import|url\(' "$OUT/$page.html"; then
        echo "check-html: $page.html refers to something outside itself" >&2
        fail=1
    fi
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 \
        --dump-dom "file://$PWD/$OUT/$page.html" >"$OUT/$page.dom" 2>"$OUT/$page.console" || {
        echo "check-html: chromium could not load $page.html" >&2
        fail=1
    }
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1800 \
        --screenshot="$OUT/$page.png" "file://$PWD/$OUT/$page.html" >/dev/null 2>&1 || true
    if grep -q 'CONSOLE' "$OUT/$page.console"; then
        echo "check-html: $page.html logged to the console:" >&2
        grep 'CONSOLE' "$OUT/$page.console" >&2
        fail=1
    fi
done
# The capacity plot alone, as a browser draws it.
timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1100,400 \
    --screenshot="$OUT/capacity.png" "file://$PWD/$OUT/capacity.svg" >/dev/null 2>&1 || {
    echo "check-html: chromium could not load capacity.svg" >&2
    fail=1
}
for page in sweep load kimi; do
    check "$page" "manifest table" 'id="manifest"'
    check "$page" "chunk timelines" 'class="plot timeline"><svg'
done
check sweep "sweep table" 'id="sweep-table"'
check sweep "sweep plot" 'id="sweep-plot"><svg'
check load "load plot" 'id="load-plot"><svg'
check load "TTFT SLO line (the run's --slo, from its manifest)" 'TTFT SLO 200 ms'
check kimi "sweep plot" 'id="sweep-plot"><svg'
check kimi "log TTFT axis" 'time \(log scale\)'
for want in 'TTFT SLO 5 ms' 'TPOT SLO 2 ms' 'capacity [0-9.]+ req/s (\([0-9.]+ req/s )?offered'; do
    if ! grep -qE "$want" "$OUT/capacity.svg"; then
        echo "check-html: capacity.svg has no $want" >&2
        fail=1
    fi
done
check compare "differences table" 'id="differences"'
check compare "comparison table" 'id="compare-table"'
check compare "overlay plot" 'id="compare-plot"><svg'
for page in compare compare-load; do
    check "$page" "headline" 'id="headline">(NEW is|mixed|the data cannot)'
    check "$page" "comparison as a table" '<table id="compare-table">'
    check "$page" "coloured verdict" '<td class="(better|worse|same|unclear)">'
    if grep -q '<pre' "$OUT/$page.dom"; then
        echo "check-html: $page.html shows the comparison as preformatted text" >&2
        fail=1
    fi
done
check compare-truth "ground-truth table" '<table id="truth-table">'
check compare-truth "ground truth, bench_serving's figure and error, this client's figure and error" \
    '<td class="l">TTFT mean</td><td>[0-9.]+</td><td>12\.217</td><td>[-+][0-9.]+ \([-+][0-9.]+%\)</td><td>[0-9.]+</td><td>[-+][0-9.]+ \([-+][0-9.]+%\)</td>'
check compare-truth "summary rows" '<td class="l">TTFT mean</td><td>12\.217</td>'
check compare-load "headline saying a slower decode is worse" 'id="headline">NEW is worse'
check compare-load "worse row under a slower decode" '<td class="worse">worse</td>'
if [[ "$fail" == 0 ]]; then
    echo "check-html: sweep.html, load.html, kimi.html, compare.html, compare-load.html, compare-truth.html and capacity.svg render with their tables, plots and lines; screenshots in $OUT/"
fi
exit "$fail"
