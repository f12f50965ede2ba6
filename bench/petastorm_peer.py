"""Peer (d) of bench/reader.py: Petastorm's make_batch_reader on the same files, with torch tensors out.

Runs in its own virtual environment (Petastorm pins pyarrow < 15). Reads JSON requests on stdin, one
a line ({"files": [...], "dense": [...], "sparse": [...], "batch": N, "pad": K}), and answers each with
one line, ANSWER and JSON: rows, seconds (the read alone, imports excluded) and the mode used.

make_batch_reader stacks each list column into a matrix, so it refuses lists of different lengths
("Length of all values in column ... are expected to be the same length"). Petastorm's documented way
around that is a TransformSpec that gives every list a fixed shape; here each id list is cut or padded
to K ids (the bench job truncates to the same K), which is what a Petastorm user has to do.
"""

import json
import sys
import time

import numpy as np
import torch
from petastorm import make_batch_reader
from petastorm.transform import TransformSpec


def read(request: dict) -> dict:
    """One timed read of the request's columns into torch tensors (imports already done)."""
    urls = ["file://" + path for path in request["files"]]
    dense, sparse, pad = request["dense"], request["sparse"], request["pad"]

    def fixed_length(frame):
        for name in sparse:
            padded = np.zeros((len(frame), pad), dtype=np.int64)
            for i, ids in enumerate(frame[name].values):
                ids = ids[:pad]
                padded[i, : len(ids)] = ids
            frame[name] = list(padded)
        return frame

    spec = TransformSpec(fixed_length, edit_fields=[(name, np.int64, (pad,), False) for name in sparse])
    started, rows = time.perf_counter(), 0
    with make_batch_reader(urls, schema_fields=dense + sparse, num_epochs=1, workers_count=2, shuffle_row_groups=True,
                           transform_spec=spec) as reader:
        for batch in reader:
            part = batch._asdict()
            tensor = torch.from_numpy(np.stack([np.nan_to_num(part[c].astype(np.float32)) for c in dense], 1))
            [torch.from_numpy(part[c]) for c in sparse]
            rows += tensor.shape[0]
    return {"rows": rows, "seconds": time.perf_counter() - started, "mode": f"id lists padded to {pad} by a TransformSpec"}


for line in sys.stdin:  # one request a line, one answer a line: the caller can keep this process for many reads
    if line.strip():
        print("ANSWER " + json.dumps(read(json.loads(line))), flush=True)  # petastorm prints lines of its own too
