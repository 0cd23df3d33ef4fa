#!/usr/bin/env bash
# The runs behind docs/peers/README.md, in one invocation: for each engine in turn (Cairn
# first, then the peers), a stress for $MINUTES minutes, a crash test for $MINUTES minutes
# (the SIGKILL loop; Cairn's time is shared with its power-loss loop, which the peers skip), and
# the erasure figure. Every report is kept as JSON beside the printed summary and the log.
#
#   docs/peers/run.sh                      # 10 minutes each, cairn fjall rocksdb
#   MINUTES=1 ENGINES="cairn fjall" docs/peers/run.sh
#
# RocksDB needs `clang` and `libclang-dev` and about 20 minutes to build on 2 cores.
set -uo pipefail
cd "$(dirname "$0")/../.."
MINUTES=${MINUTES:-10}
ENGINES=${ENGINES:-cairn fjall rocksdb}
SEED=${SEED:-1}
OUT=${OUT:-docs/peers/results/$(date +%F)}
features=$(echo "$ENGINES" | tr ' ' '\n' | grep -v '^cairn$' | paste -sd, -)
cargo build --release -p cairn-cli ${features:+--features "$features"} || exit 2
bin=${CARGO_TARGET_DIR:-target}/release/cairn
mkdir -p "$OUT"
worst=0
run() { # name, then the command; records its exit code beside its output
  local name=$1
  shift
  echo "== $name: $*" >&2
  "$bin" "$@" >"$OUT/$name.txt" 2>"$OUT/$name.log"
  local code=$?
  echo "$name exit $code" | tee -a "$OUT/exit-codes.txt" >&2
  ((code > worst)) && worst=$code
}
: >"$OUT/exit-codes.txt"
for engine in $ENGINES; do
  run "stress-$engine" stress --engine "$engine" --duration "${MINUTES}m" --seed "$SEED" \
    --no-progress --report "$OUT/stress-$engine.json"
  run "crashtest-$engine" crashtest --engine "$engine" --mode both --duration "${MINUTES}m" \
    --seed "$SEED" --report "$OUT/crashtest-$engine.json"
  run "erasure-$engine" stress erasure --engine "$engine" --settle 30s --sample 2s \
    --report "$OUT/erasure-$engine.json" --plot "$OUT/erasure-$engine.png"
done
exit "$worst"
