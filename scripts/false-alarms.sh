#!/usr/bin/env bash
# The false-alarm rate of `bench-client compare`: PAIRS pairs of sweeps of one configuration of the
# embedded mock, each run with its own seed (prompts and the mock's speculative draws), compared;
# counts the rows that say `worse` or `better`. The figure goes in BENCHMARKS.md.
#   cargo build --release -p bench-client && scripts/false-alarms.sh [PAIRS]
set -euo pipefail
PAIRS=${1:-20}
BIN=${BIN:-target/release/bench-client}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
SWEEP=(sweep --contexts 1k,4k --runs 16 --output-tokens 128 --no-progress)
rows=0 alarms=0 same=0
for i in $(seq 1 "$PAIRS"); do
  a=$((2 * i)) b=$((2 * i + 1))
  "$BIN" "${SWEEP[@]}" --seed "$a" --mock-set "seed=$a" --out "$DIR/$i-a.jsonl" >/dev/null 2>&1
  "$BIN" "${SWEEP[@]}" --seed "$b" --mock-set "seed=$b" --out "$DIR/$i-b.jsonl" >/dev/null 2>&1
  out=$("$BIN" compare "$DIR/$i-a.jsonl" "$DIR/$i-b.jsonl" --format csv 2>/dev/null | tail -n +2)
  n=$(grep -c . <<<"$out")
  f=$(grep -cE ',(worse|better),' <<<"$out" || true)
  s=$(grep -c ',same,' <<<"$out" || true)
  rows=$((rows + n)) alarms=$((alarms + f)) same=$((same + s))
  echo "pair $i: $n rows, $f false alarms $(grep -E ',(worse|better),' <<<"$out" | cut -d, -f1,2,11 | tr '\n' ' ')"
done
echo "total: $rows rows, $same same, $((rows - same - alarms)) unclear, $alarms worse or better ($(awk -v a="$alarms" -v r="$rows" 'BEGIN { printf "%.1f", 100 * a / r }')%)"
