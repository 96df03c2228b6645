#!/usr/bin/env bash
# The prepared run for a session that is lent a GPU (about 15 minutes of device time, start-up
# included): the CUDA checks and the GPU measurements of issues 25 and 26, in one call of the device
# tool, each step under its own time limit so that one slow step cannot eat the others.
#
# The device's Python has torch, numpy, scipy, pandas, scikit-learn and matplotlib, not tqdm or
# pytest. Prepare the wheels here, then carry them:
#     .venv/bin/pip download --only-binary=:all: --no-deps -d bench/wheels tqdm pytest pluggy iniconfig packaging
# and call the device tool with command "bash bench/gpu_session.sh" and carry ["bench/wheels"].
# On a CPU, GPU_SESSION_SMALL=1 runs the same steps at small sizes (the CUDA tests skip, saying so).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-/tmp/gpu_session}"
mkdir -p "$OUT"
PY="${PY:-python}"
if [ -d bench/wheels ]; then
    "$PY" -m pip install -q --no-index --find-links bench/wheels tqdm pytest 2>&1 | tail -1
fi
export PYTHONPATH="$PWD"
DEVICE=cuda
N=10000000
if [ "${GPU_SESSION_SMALL:-0}" = 1 ]; then DEVICE=cpu; N=20000; fi

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi";
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"; } | tee "$OUT/machine.txt"

echo "== 1. the CUDA checks (tests/test_gpu.py)"
timeout 240 "$PY" -m pytest tests/test_gpu.py -v -rs -p no:cacheprovider 2>&1 | tee "$OUT/test_gpu.txt" | tail -15

echo "== 2. the estimator on the device against KMeans on all CPU cores (issue 26)"
timeout 300 "$PY" bench/estimator.py --part speed --device "$DEVICE" --n "$N" --d 32 --k 100 --iters 20 \
    --repeats 3 --dtypes float64 2>&1 | tee "$OUT/estimator.txt" | tail -3

echo "== done; results in $OUT"
