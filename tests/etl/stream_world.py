"""The landing zone the streaming tests share: generated days with planted bad records, and day 1 joined in batch.

The fixtures are in ``tests/etl/conftest.py`` (``world``, ``streamed``, made once per test process);
this module holds their constants and helpers.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from pyspark.sql import functions as F

from etl.stream import job as stream

DATASET = "t_stream"
DAY = dt.date(2026, 11, 1)
DS = "2026-11-01"
REPO = Path(__file__).resolve().parents[2]
QUARANTINE_COLUMNS = ["stream", "source_file", "line", "raw", "problem", "reason", "ds"]

BAD_IMPRESSIONS = [
    '{"impression_id": "bad-1", "event_time": "2026-11-01T05:00:00Z", "dense": {',  # truncated
    json.dumps({"impression_id": "bad-2", "user_id": 1, "item_id": 2, "event_time": "2026-11-01T05:01:00Z",
                "dense": {"user_ctr_7d": "abc"}}),  # fmt: skip
    json.dumps({"impression_id": "bad-3", "user_id": 1, "item_id": 2, "event_time": "2026-11-02T05:01:00Z"}),
    "",
]
BAD_LABELS = [json.dumps({"impression_id": "x", "label_type": "share", "event_time": "2026-11-01T05:02:00Z"}), "{"]


def _config(home: Path, registry_dir: Path, landing: Path, **kw) -> stream.StreamConfig:
    return stream.StreamConfig(dataset=kw.pop("dataset", DATASET), home=home, landing=str(landing),
                               registry_dir=registry_dir, **kw)  # fmt: skip


def _batch_day(spark):
    return spark.table(f"featurehouse.{DATASET}_batch").where(F.col("ds") == DS)

