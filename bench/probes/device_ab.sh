#!/usr/bin/env bash
# The CPU benchmarks, two source trees side by side, on the quiet device
# machine (16 cores, nothing else running): is a change within noise of the
# code before it? Rounds interleave the trees so that drift hits both alike.
#
#   bash bench/probes/device_ab.sh OLD_TREE NEW_TREE OUT_DIR [ROUNDS] [--quick]
#
# Each tree runs from its own source (PYTHONPATH=proto:hooks:sidecar) with the
# machine's python3 (torch, grpcio, protobuf preinstalled; telemetry off, as
# OpenTelemetry is not there). Results: OUT_DIR/<side>-<bench>-<round>.json
# (their output in OUT_DIR/runs.log);
# bench/probes/ab_report.py turns them into medians and new/old ratios.
set -u
old=$(cd "$1" && pwd); new=$(cd "$2" && pwd); out=$(mkdir -p "$3" && cd "$3" && pwd)
rounds=${4:-2}; quick=${5:-}
hook_args=(--steps 300000 --seconds 15 --timed-calls 100000)
path_args=(--repeats 5)
scale_args=(--workers 1000,2000 --duration 6 --warmup 2 --profile-workers 0 --telemetry off)
if [[ $quick == --quick ]]; then
  hook_args=(--quick); path_args=(--quick); scale_args=(--quick --profile-workers 0 --telemetry off)
fi
run() {  # side tree name args...
  local side=$1 tree=$2 name=$3; shift 3
  # Extra packages the machine lacks may come in on PYTHONPATH (kept after the tree's).
  (cd "$tree" && PYTHONPATH=proto:hooks:sidecar${PYTHONPATH:+:$PYTHONPATH} timeout 300 \
      python3 "bench/bench_$name.py" "$@" --json "$out/$side-$name-$round.json" \
      >> "$out/runs.log" 2>&1) \
    || echo "$side $name round $round: exit $?" | tee -a "$out/failures.txt"
}
for round in $(seq 1 "$rounds"); do
  for side in old new; do
    tree=$old; [[ $side == new ]] && tree=$new
    run "$side" "$tree" hook "${hook_args[@]}"
    run "$side" "$tree" report_path "${path_args[@]}"
    run "$side" "$tree" scale "${scale_args[@]}"
  done
done
python3 "$new/bench/ab_report.py" "$out" | tee "$out/ab.md"
