#!/usr/bin/env bash
# The row kernels and the linear-algebra kernels on one GPU within a time budget
# (BUDGET seconds, default 190), logs and JSON in $OUT. Run from the project root with
# PYTHONPATH set. Correctness first, timing after, the peers in the same run:
#
#   1. in parallel (compiles are CPU-bound, the GPU work here is small):
#      the GPU tests (tests/gpu/test_rows_linalg_gpu.py, the 4096 x 4096 svd left to
#      the bench), a first bench run of rows_wide and cholesky that fills the compile
#      caches (torch.compile's and Tessera's; its timings are discarded), and the svd
#      bench, which compiles every size and then waits for the gate file;
#   2. alone: the bench run of rows_wide and cholesky that is reported;
#   3. the gate opens: the svd bench times (checked against float64 first);
#   4. with the time left, the streaming-kernel sweep (bench/row_stream_sweep.py).
set -uo pipefail
OUT=${OUT:-gpu-logs}
BUDGET=${BUDGET:-190}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
gate=/tmp/tessera-svd-gate-$$
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
echo "commit ${TESSERA_COMMIT:-unknown}; $(date -u)" | tee -a "$OUT/device.txt"
left() { local t=$((BUDGET - SECONDS - ${1:-0})); echo $((t > 5 ? t : 5)); }
TESSERA_NO_DISK_CACHE=1 timeout "$(left)" python3 bench/run.py --cases svd --gate "$gate" \
  --out "$OUT/svd.json" \
  > "$OUT/svd.log" 2>&1 &
svd=$!
timeout 110 python3 -m pytest -q -rfE -p no:cacheprovider tests/gpu/test_rows_linalg_gpu.py \
  -k "not (svd and 4096)" > "$OUT/tests.log" 2>&1 &
tests=$!
timeout 110 python3 bench/run.py --cases rows_wide,cholesky --out "$OUT/warm.json" \
  > "$OUT/warm.log" 2>&1 &
warm=$!
wait $tests; tail -5 "$OUT/tests.log"
wait $warm; echo "warm-up run done at ${SECONDS}s"
timeout "$(left 45)" python3 bench/run.py --cases rows_wide,cholesky \
  --out "$OUT/bench.json" > "$OUT/bench.log" 2>&1
touch "$gate"
wait $svd
echo "benches done at ${SECONDS}s"
if [ "$(left)" -gt 25 ]; then
  timeout "$(left 3)" python3 bench/row_stream_sweep.py > "$OUT/sweep.log" 2>&1
fi
rm -f "$gate"
echo "=== tests"; grep -E "passed|failed|error" "$OUT/tests.log" | tail -3
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
echo "=== rows_wide, cholesky"; sed -n '/^case /,$p' "$OUT/bench.log"
echo "=== svd"; grep "^\[bench\] svd" "$OUT/svd.log"; grep -E "Error" "$OUT/svd.log" | head -5
echo "=== sweep"; cat "$OUT/sweep.log" 2>/dev/null | tail -20
