"""The faults ``featurehouse demo`` plants in its generated logs, to show the quarantine and the quality gate.

* :func:`plant_malformed`: a logger that wrote a few broken records into a good day, next to
  its 20,000 good ones (a truncated line, a string for a float, a string for an id list, a
  missing id, an impossible time, a clock-skewed time, an empty file, two bad label lines).
  They are quarantined; the day is published.
* :func:`break_release`: a whole day logged by a broken serving release: ``user_ctr_7d`` no
  longer logged and 90% of click events lost. The day fails the quality gate and is not published.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from pathlib import Path

from schemas.names import format_ds

DEAD_FEATURE = "user_ctr_7d"
LOST_CLICKS = 0.9


def _compact(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"))


def _first_line(folder: Path) -> str:
    for path in sorted(folder.rglob("*.jsonl")):
        with path.open(encoding="utf-8") as lines:
            first = lines.readline().strip()
            if first:
                return first
    raise FileNotFoundError(f"no log lines under {folder}")


def plant_malformed(landing: Path, day: dt.date) -> list[str]:
    """Add broken records to ``day``'s impression and label logs; return one line per fault planted."""
    ds = format_ds(day)
    impressions = landing / "impressions" / f"ds={ds}"
    template = _first_line(impressions)
    good = json.loads(template)
    bad_float = {**good, "impression_id": good["impression_id"] + "-abc", "dense": {**good["dense"], DEAD_FEATURE: "abc"}}
    sparse_key = next(iter(good["sparse"]))
    bad_ids = {**good, "impression_id": good["impression_id"] + "-ids", "sparse": {**good["sparse"], sparse_key: "3,17"}}
    no_id = {k: v for k, v in good.items() if k != "impression_id"}
    bad_time = {**good, "impression_id": good["impression_id"] + "-time", "event_time": f"{ds}T25:61:00.000Z"}
    skewed = {**good, "impression_id": good["impression_id"] + "-skew",
              "event_time": f"{format_ds(day - dt.timedelta(days=3))}T12:00:00.000Z"}  # fmt: skip
    faults = [
        ("a line cut short (the logger died mid-write)", template[: len(template) // 3]),
        (f"a string for the float {DEAD_FEATURE}", _compact(bad_float)),
        (f"a string for the id list {sparse_key}", _compact(bad_ids)),
        ("a record without impression_id", _compact(no_id)),
        ("an impossible event_time (25:61)", _compact(bad_time)),
        ("an event_time three days early (clock skew)", _compact(skewed)),
    ]
    folder = impressions / "hour=23"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "part-broken-logger.jsonl").write_text("".join(line + "\n" for _what, line in faults))
    (folder / "part-empty.jsonl").write_text("")
    labels = landing / "labels" / f"ds={ds}" / "hour=23"
    labels.mkdir(parents=True, exist_ok=True)
    label_faults = [
        ("a label line cut short", f'{{"impression_id":"{good["impression_id"]}","label_ty'),
        ("a label of unknown type 'share'",
         _compact({"impression_id": good["impression_id"], "label_type": "share", "event_time": good["event_time"]})),
    ]  # fmt: skip
    (labels / "part-broken-logger.jsonl").write_text("".join(line + "\n" for _what, line in label_faults))
    return ([f"impressions ds={ds}: {what}" for what, _line in faults] + [f"impressions ds={ds}: an empty file"]
            + [f"labels ds={ds}: {what}" for what, _line in label_faults])  # fmt: skip


def break_release(landing: Path, day: dt.date, *, seed: int) -> list[str]:
    """Rewrite ``day``'s logs as a broken release wrote them; return one line per fault."""
    ds = format_ds(day)
    dead = re.compile(rf'"{DEAD_FEATURE}":[^,}}]*,|,"{DEAD_FEATURE}":[^,}}]*(?=}})')  # the key and one comma
    for path in sorted((landing / "impressions" / f"ds={ds}").rglob("*.jsonl")):
        path.write_text(dead.sub("", path.read_text(encoding="utf-8")), encoding="utf-8")
    rng = random.Random(seed)
    prefix = f'{{"impression_id":"i{day:%Y%m%d}-'
    dropped = kept = 0
    for label_day in (day, day + dt.timedelta(days=1)):  # a click comes within the hour: on ds or just after
        for path in sorted((landing / "labels" / f"ds={format_ds(label_day)}").rglob("*.jsonl")):
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            out = []
            for line in lines:
                if line.startswith(prefix) and '"label_type":"click"' in line and rng.random() < LOST_CLICKS:
                    dropped += 1
                    continue
                kept += line.startswith(prefix) and '"label_type":"click"' in line
                out.append(line)
            path.write_text("".join(out), encoding="utf-8")
    return [f"impressions ds={ds}: {DEAD_FEATURE} no longer logged",
            f"labels of ds={ds}: {dropped:,} of {dropped + kept:,} click events lost"]  # fmt: skip
