#!/usr/bin/env bash
# The GPU check (issues 5 and 32): DLRM steps fed by the reader with 0, 1 and 2 loader workers against the same
# steps on batches already on the device (the stall-free ceiling), samples/s and stall of each, median of 3
# runs after a warm-up (bench/trainer_stall.py, on its own 200,000-row table built under /tmp first).
#
# It runs on a GPU host as that host is: its own python3 (PYTHON=...), its own torch, the model that loads
# there (TorchRec's where FBGEMM does, else the pure-torch one; the first line says which). Packages the
# reader needs and the host lacks come as wheels from .whl/ (`make gpu-wheels` here; carry .whl), installed
# under /tmp/featurehouse-site. DPP is not checked: Ray's wheel does not fit the device tool's 64 MiB beside them.
#
#   bench/gpu_check.sh                                     # on the GPU host: cuda
#   DEVICE=cpu PYTHON=.venv/bin/python bench/gpu_check.sh --rows 20000 --steps 20   # the same command, tried on a CPU
# Extra arguments go to bench/trainer_stall.py (python -m bench.trainer_stall --help).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
if ! "$PY" -c 'import deltalake, pydantic, yaml' 2>/dev/null; then
    ls .whl/*.whl >/dev/null 2>&1 || { echo "the reader's packages are missing and .whl/ holds no wheels: run make gpu-wheels where pip works and carry .whl" >&2; exit 1; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/featurehouse-site .whl/*.whl
    export PYTHONPATH=/tmp/featurehouse-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ "$DEVICE" = cuda ]; then
    "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device visible: this check is for a GPU host (DEVICE=cpu tries it on a CPU)")'
fi
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'
exec "$PY" -m bench.trainer_stall --device "$DEVICE" --models auto --workers 0,1,2 --rows 200000 --steps 200 --runs 3 \
    --out /tmp/featurehouse-gpu-check "$@"
