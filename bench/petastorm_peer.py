"""Peer (d) of bench/reader.py: Petastorm's make_batch_reader and its torch DataLoader on the same files.

Runs in its own virtual environment (Petastorm's pins clash with ours). Reads a JSON request on
stdin ({"files": [...], "columns": [...], "batch": N}) and prints one JSON line with rows and seconds.
"""

import json
import sys
import time

from petastorm import make_batch_reader
from petastorm.pytorch import DataLoader

request = json.loads(sys.stdin.read())
urls = ["file://" + path for path in request["files"]]
started, rows = time.perf_counter(), 0
with make_batch_reader(urls, schema_fields=request["columns"], num_epochs=1, workers_count=1) as reader:
    for batch in DataLoader(reader, batch_size=request["batch"]):
        rows += len(batch[request["columns"][0]])
print(json.dumps({"rows": rows, "seconds": time.perf_counter() - started}))
