#!/usr/bin/env bash
# Distributed check on a machine with >= 2 CUDA GPUs, run from the repository root with
# PYTHONPATH (tessera and its pure-Python dependencies) prepared by the caller:
#
#   OUT=/path/to/logs scripts/dist_gpu_check.sh          # NPROC=2 by default
#
# 1. torchrun of tests/gpu/dist_programs.py (TP GEMM, row-split GEMM, the guide's
#    all_gather form, DP step, 2D mesh, sharded gradient, distributed_loss gradient,
#    2-stage pipeline) on NCCL, 3 times: every output is checked against float64 on
#    every rank, and the output hashes must be bitwise identical across the runs;
# 2. pytest tests/gpu/test_dist_gpu.py;
# 3. torchrun bench/allreduce.py, 1 MiB - 1 GiB, JSON in $OUT/allreduce.json.
# Logs go to $OUT; a summary table is printed last. Exit status 0 only if all passed.
set -uo pipefail
OUT=${OUT:-dist-gpu-logs}
NPROC=${NPROC:-2}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export TESSERA_CACHE_DIR=${TESSERA_CACHE_DIR:-/tmp/tessera-cache}
status=0
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit /' | tee -a "$OUT/device.txt"

for i in 1 2 3; do
  echo "== dist_programs run $i"
  if ! timeout 200 torchrun --standalone --nproc-per-node "$NPROC" tests/gpu/dist_programs.py \
      --json "$OUT/programs_$i.json" >"$OUT/programs_$i.log" 2>&1; then
    echo "dist_programs run $i FAILED; last lines of $OUT/programs_$i.log:"
    grep -v '^W[0-9]' "$OUT/programs_$i.log" | tail -25
    status=1
  fi
done

echo "== pytest tests/gpu/test_dist_gpu.py"
timeout 300 python3 -m pytest -q -rfE -p no:cacheprovider tests/gpu/test_dist_gpu.py \
  >"$OUT/pytest_dist_gpu.log" 2>&1 || status=1
tail -15 "$OUT/pytest_dist_gpu.log"

echo "== bench/allreduce.py"
timeout 240 torchrun --standalone --nproc-per-node "$NPROC" bench/allreduce.py \
  --min-mib 1 --max-mib 1024 --json "$OUT/allreduce.json" >"$OUT/allreduce.log" 2>&1 || status=1

python3 - "$OUT" <<'PY' || status=1
import json, os, sys
out = sys.argv[1]
runs = []
for i in (1, 2, 3):
    p = os.path.join(out, f"programs_{i}.json")
    runs.append(json.load(open(p)) if os.path.exists(p) else None)
ok = True
print()
print("program          ranks  max err    hash (run 1, per rank)                 3 runs identical")
done = [r for r in runs if r is not None]
if not done:
    print("  no dist_programs run finished")
    ok = False
for name in (done[0]["hashes"] if done else {}):
    hs = [tuple(r["hashes"].get(name, ())) for r in done]
    same = len(done) == 3 and all(h == hs[0] for h in hs)
    ok &= same
    err = max(r["max_err"][name] for r in done)
    print(f"{name:<16} {len(hs[0]):>5}  {err:9.2e}  {' '.join(hs[0]):<38} {'yes' if same else 'NO'}")
p = os.path.join(out, "allreduce.json")
if os.path.exists(p):
    b = json.load(open(p))
    print(f"\nall_reduce on {b['device']} ({b['date']})")
    print(f"{'MiB':>6} {'det ms':>9} {'nccl ms':>9} {'det GB/s':>9} {'nccl GB/s':>9} {'repro':>6} {'ordered':>8}")
    for r in b["rows"]:
        ok &= r["reproducible"] and r["equals_rank_ordered_sum"]
        print(f"{r['mib']:>6g} {r['deterministic_ms']:>9.3f} {r['nccl_ms']:>9.3f} "
              f"{r['deterministic_gbps']:>9.2f} {r['nccl_gbps']:>9.2f} "
              f"{str(r['reproducible']):>6} {str(r['equals_rank_ordered_sum']):>8}")
else:
    print("\nall_reduce bench: no allreduce.json (see allreduce.log)")
    ok = False
sys.exit(0 if ok else 1)
PY
pytest_line=$(grep -E "passed|failed|skipped|error" "$OUT/pytest_dist_gpu.log" | tail -1)
echo "pytest tests/gpu/test_dist_gpu.py: $pytest_line"
echo "dist_gpu_check: $([ $status -eq 0 ] && echo PASS || echo FAIL) (logs in $OUT)"
exit $status
