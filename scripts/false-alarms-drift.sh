#!/usr/bin/env bash
# The false-alarm rate of `bench-client compare` when the machine drifts between runs: every sweep of
# one configuration of the embedded mock gets its own seed and its own speed: every modelled time
# scaled (time_scale) by a factor drawn uniformly within +-DRIFT percent (what a shared machine does to
# a real server). Each of PAIRS comparisons is made twice: one run a side (A1 against B1) and three
# runs a side, interleaved (A1 A2 A3 against B1 B2 B3). A `worse` or `better` row is a false alarm.
# With SLOWER=P every NEW run is also P percent slower (time_scale divided by 1 + P/100): then the
# `worse` rows are what a real regression shows through the drift.
# Runs on the paused clock (--simulate): seconds per sweep. The figures go in BENCHMARKS.md.
#   cargo build --release -p bench-client && DRIFT=10 scripts/false-alarms-drift.sh [PAIRS]
set -euo pipefail
PAIRS=${1:-20}
DRIFT=${DRIFT:-10}
SLOWER=${SLOWER:-0}
BIN=${BIN:-target/release/bench-client}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
# Prefill slowed to 20 us a token, so that TTFT (20 and 80 ms) is well above the paused clock's 1 ms.
SWEEP=(sweep --simulate --contexts 1k,4k --runs 16 --output-tokens 128 --no-progress
    --mock-set prefill_per_token_s=0.00002)
# factor SEED: the run's speed factor, reproducible from its seed.
# (time_scale > 1 is a faster machine.)
factor() { awk -v s="$1" -v d="$DRIFT" -v p="$2" 'BEGIN { srand(s); printf "%.6f", (1 + d / 100 * (2 * rand() - 1)) / (1 + p / 100) }'; }
run() {
    local seed=$1 out=$2 f
    f=$(factor "$seed" "${3:-0}")
    "$BIN" "${SWEEP[@]}" --seed "$seed" --mock-set "seed=$seed" --mock-set "time_scale=$f" \
        --out "$out" >/dev/null 2>&1
}
count() { # count CSV: rows, worse, better
    local out
    out=$(tail -n +2 <<<"$1")
    echo "$(grep -c . <<<"$out") $(grep -c ',worse,' <<<"$out" || true) $(grep -c ',better,' <<<"$out" || true)"
}
r1=0 w1=0 b1=0 r3=0 w3=0 b3=0
for i in $(seq 1 "$PAIRS"); do
    for k in 1 2 3; do
        run $((100 * i + 2 * k)) "$DIR/$i-a$k.jsonl"
        run $((100 * i + 2 * k + 1)) "$DIR/$i-b$k.jsonl" "$SLOWER"
    done
    read -r n w b < <(count "$("$BIN" compare "$DIR/$i-a1.jsonl" "$DIR/$i-b1.jsonl" --format csv 2>/dev/null)")
    r1=$((r1 + n)) w1=$((w1 + w)) b1=$((b1 + b))
    read -r n3 w3i b3i < <(count "$("$BIN" compare --base "$DIR/$i"-a{1,2,3}.jsonl --new "$DIR/$i"-b{1,2,3}.jsonl --format csv 2>/dev/null)")
    r3=$((r3 + n3)) w3=$((w3 + w3i)) b3=$((b3 + b3i))
    echo "comparison $i: one run a side $w worse, $b better of $n rows; three runs a side $w3i worse, $b3i better of $n3"
done
echo "drift +-$DRIFT%, NEW $SLOWER% slower: one run a side $w1 worse, $b1 better of $r1 rows; three runs a side $w3 worse, $b3 better of $r3"
