"""Peer (d) of bench/reader.py: Petastorm's make_batch_reader on the same files, with torch tensors out.

Runs in its own virtual environment (Petastorm pins pyarrow < 15). Reads a JSON request on stdin
({"files": [...], "dense": [...], "sparse": [...], "batch": N}) and prints one JSON line: rows,
seconds and the mode used. Petastorm 0.13 refuses variable-length id lists ("Length of all values in
column ... are expected to be the same length"); then it reads the dense columns only, and says so.
"""

import json
import sys
import time

import numpy as np
import torch
from petastorm import make_batch_reader

request = json.loads(sys.stdin.read())
urls = ["file://" + path for path in request["files"]]


def read(dense, sparse):
    started, rows = time.perf_counter(), 0
    with make_batch_reader(urls, schema_fields=dense + sparse, num_epochs=1, workers_count=2,
                           shuffle_row_groups=True) as reader:
        for batch in reader:
            part = batch._asdict()
            tensor = torch.from_numpy(np.stack([np.nan_to_num(part[c].astype(np.float32)) for c in dense], 1))
            for c in sparse:
                lists = part[c]
                torch.from_numpy(np.fromiter((len(x) for x in lists), dtype=np.int32, count=len(lists)))
                torch.from_numpy(np.concatenate(lists).astype(np.int64))
            rows += tensor.shape[0]
    return rows, time.perf_counter() - started


try:
    rows, seconds = read(request["dense"], request["sparse"])
    mode = "make_batch_reader batches -> tensors"
except RuntimeError as err:  # variable-length lists: "Length of all values in column ... expected to be the same"
    rows, seconds = read(request["dense"], [])
    mode = f"DENSE COLUMNS ONLY: make_batch_reader refuses variable-length id lists ({str(err)[:90]}...)"
print(json.dumps({"rows": rows, "seconds": seconds, "mode": mode}))
