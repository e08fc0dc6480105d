#!/usr/bin/env bash
# Run on the GPU machine from the project root (with the pure-Python wheels that
# machine lacks carried in .whl/, see the device README): the main example on the
# GPU, then the GPU test suite. Logs go to $OUT (or ./gpu-logs).
set -uo pipefail
OUT=${OUT:-gpu-logs}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
  export PATH=/tmp/site/bin:$PATH
fi
export PYTHONUNBUFFERED=1
export TESSERA_CACHE_DIR=${TESSERA_CACHE_DIR:-/tmp/tessera-cache}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
echo "commit ${TESSERA_COMMIT:-unknown}" | tee -a "$OUT/device.txt"
python3 examples/attention.py 2>&1 | tee "$OUT/attention.log" | tail -3
python3 -m pytest -q -rfE -p no:cacheprovider tests/gpu "$@" 2>&1 | tee "$OUT/gpu-tests.log" | tail -40
if [ -n "${TESSERA_BENCH:-}" ]; then
  python3 bench/run.py $TESSERA_BENCH --out "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | tail -40
fi
