#!/usr/bin/env bash
# The prepared run for a session that is lent a GPU (about 15 minutes of device time, start-up
# included): the CUDA checks and the GPU measurements of issues 25 and 26, in one call of the device
# tool, each step under its own time limit so that one slow step cannot eat the others (at most about
# 9.5 minutes in all: the steps' limits add to 555 s, after the wheel install and the machine report).
# Most important first.
#
# The lent machine's image (a CUDA build of PyTorch; no network, so nothing can be installed there
# from a registry) has torch, numpy, scipy, pandas, scikit-learn, matplotlib, numba, tqdm and pytest,
# not entmax (the authors' code needs it) or POT and Dask (not needed here). Prepare here, once per
# session (both folders are ignored by git):
#     .venv/bin/pip download --only-binary=:all: --no-deps -d bench/wheels entmax==1.3
#     git clone https://github.com/rithram/kmeans-trf bench/out/authors     # or the fetched mirror
# then call the device tool with command "bash bench/gpu_session.sh" and carry
# ["bench/wheels", "bench/out/authors"]. What it writes under $OUT comes back.
# On a CPU, GPU_SESSION_SMALL=1 runs the same steps at small sizes (the CUDA tests skip, saying so).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-/tmp/gpu_session}"
mkdir -p "$OUT"
PY="${PY:-python3}"
export PYTHONUNBUFFERED=1
if ls bench/wheels/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        bench/wheels/*.whl 2>&1 | tail -1
    export PYTHONPATH="/tmp/site:$PWD"
else
    export PYTHONPATH="$PWD"
fi
DEVICE=cuda; N=10000000; SEED_N=2000000; BIG_CHUNK=1048576; STEPS=200; TTQ_CAP=4000; CATALOG_S=40; SMALL=()
if [ "${GPU_SESSION_SMALL:-0}" = 1 ]; then DEVICE=cpu; N=20000; SEED_N=20000; BIG_CHUNK=8192; STEPS=10; TTQ_CAP=200; CATALOG_S=5; SMALL=(--quick); fi

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi";
  nproc; "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"; } \
  | tee "$OUT/machine.txt"

echo "== 1. the CUDA checks (tests/test_gpu.py): construction, replay, resume, no host sync, the graph, the estimator"
timeout 120 "$PY" -m pytest tests/test_gpu.py -v -rs -p no:cacheprovider 2>&1 | tee "$OUT/test_gpu.txt" | tail -25

echo "== 2. ms per training step, eager against one CUDA graph (issue 25, part 1)"
timeout 60 "$PY" bench/gpu_step.py --device "$DEVICE" --steps "$STEPS" --repeats 3 "${SMALL[@]}" 2>&1 \
    | tee "$OUT/gpu_step.txt"

echo "== 3. the paper catalog on one GPU: step costs of its run shapes, extrapolated (issue 25, part 4)"
timeout 80 "$PY" bench/catalog_gpu.py --device "$DEVICE" --budget-s "$CATALOG_S" --steps 30 --share 2 4 "${SMALL[@]}" \
    2>&1 | tee "$OUT/catalog_gpu.txt" | tail -4

echo "== 4. the estimator on the device against KMeans on all CPU cores (issue 26, part 3): two chunk sizes"
for CHUNK in 16384 "$BIG_CHUNK"; do
    timeout 60 "$PY" bench/estimator.py --part speed --device "$DEVICE" --n "$N" --d 32 --k 100 --iters 20 \
        --repeats 2 --dtypes float64 --chunk "$CHUNK" 2>&1 | tee -a "$OUT/estimator.txt" | tail -2
done
timeout 45 "$PY" bench/estimator.py --part seeding --device "$DEVICE" --n "$SEED_N" --d 32 --k 100 --repeats 1 \
    --dtypes float64 --chunk "$BIG_CHUNK" 2>&1 | tee -a "$OUT/estimator.txt" | tail -2

echo "== 5. time to beat one Lloyd step: the authors' train.py against ours, eager and graphed (issue 25, part 2)"
if [ -f bench/out/authors/train.py ]; then
    timeout 130 "$PY" bench/time_to_quality.py --authors bench/out/authors --seeds 1 --device "$DEVICE" \
        --cap "$TTQ_CAP" $([ "$DEVICE" = cuda ] && echo --graph) 2>&1 | tee "$OUT/time_to_quality.txt"
else
    echo "no bench/out/authors: carry a checkout of rithram/kmeans-trf there" | tee "$OUT/time_to_quality.txt"
fi

echo "== done; results in $OUT"
