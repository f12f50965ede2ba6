#!/usr/bin/env bash
# The GPU check of issue 5, for a host with CUDA: fixed DLRM steps fed by the reader with 0, 1, 2
# and 4 loader workers, then from batches already on the device (the unstalled ceiling); prints
# samples/s and the stall fraction of each. Needs `make .venv` first; about 2 minutes plus the
# one-time table build. Extra arguments go to bench/trainer_stall.py (see python -m bench.trainer_stall --help).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device visible: this check is for a GPU host")'
.venv/bin/python -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'
exec .venv/bin/python -m bench.trainer_stall --device cuda --steps 200 "$@"
