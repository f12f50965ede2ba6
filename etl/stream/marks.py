"""The stream's watermark, kept by the stream itself: the newest event time of each source, through each micro-batch.

Spark's own watermark is not used. Each micro-batch, :class:`etl.stream.writer.BatchWriter`
appends the newest valid impression's and label's event time seen so far to the stream's batches
table (:mod:`etl.stream.batches`), its last write before Spark's commit file, exactly once. A
micro-batch judges its records by the marks of the batches before it, so a batch run again after a
crash judges them the same way; and a restart reads the marks back, so the watermark it starts from
is the one the last batch left, for both sources. The table is read through Spark, so this holds
wherever the batches run: in the stream's own session, or in an engine's Python worker.

* The **watermark** is the newest event time of either source, less the delay: a record on either
  side moves it on.
* A ds is **closed** once the watermark has passed its end plus the longest label window *and* the
  impressions have passed its end (less the delay). The second rule protects the slower source: a
  day is not closed by labels that ran ahead of its impressions.
* Once its ds is closed, an impression is late (quarantined as ``late``, with how late); a label is
  late if its impression's ds is closed (the late-labels table).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from schemas.errors import ConfigError
from schemas.registry import DatasetRegistry

#: The stream's plan, written into every checkpoint it starts: a checkpoint without it is of the previous plan.
PLAN = "records-v2"
_EPSILON = dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class Marks:
    """The newest valid impression's and label's event time seen through a micro-batch (None: none yet)."""

    impressions: dt.datetime | None = None
    labels: dt.datetime | None = None

    def after(self, impressions: dt.datetime | None, labels: dt.datetime | None) -> Marks:
        newest = lambda a, b: max(filter(None, (a, b)), default=None)  # noqa: E731
        return Marks(newest(self.impressions, impressions), newest(self.labels, labels))

    def watermark(self, delay: dt.timedelta) -> dt.datetime | None:
        newest = max(filter(None, (self.impressions, self.labels)), default=None)
        return None if newest is None else newest - delay

    def closed_through(self, registry: DatasetRegistry, delay: dt.timedelta) -> dt.date | None:
        """The last closed ds (see the module docstring), or None."""
        watermark = self.watermark(delay)
        if watermark is None or self.impressions is None:
            return None
        by_windows = (watermark - registry.max_window - _EPSILON).date() - dt.timedelta(days=1)
        by_impressions = (self.impressions - delay - _EPSILON).date() - dt.timedelta(days=1)
        return min(by_windows, by_impressions)

    @classmethod
    def from_json(cls, text: str) -> Marks:
        values = json.loads(text)
        return cls(*(dt.datetime.fromisoformat(values[k]) if values[k] else None for k in ("impressions", "labels")))


@dataclass(frozen=True)
class History:
    """The marks each micro-batch left, by batch id (read from the stream's batches table, :mod:`etl.stream.batches`)."""

    marks: Mapping[int, Marks] = field(default_factory=dict)

    def through(self, batch_id: int | None) -> Marks:
        """The marks through micro-batch ``batch_id`` (the last written at or before it; None: before any)."""
        ids = [i for i in self.marks if batch_id is not None and i <= batch_id]
        return self.marks[max(ids)] if ids else Marks()

    def last_batch(self) -> int | None:
        """The last micro-batch that wrote its marks (None: none)."""
        return max(self.marks, default=None)

    def with_batch(self, batch_id: int, marks: Marks) -> History:
        return History({**self.marks, batch_id: marks})


def legacy_marks(checkpoint: Path) -> dict[int, Marks]:
    """The marks that versions before the batches table wrote as files under ``<checkpoint>/featurehouse/marks``."""
    folder = checkpoint / "featurehouse" / "marks"
    files = [p for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
    return {int(p.name): Marks.from_json(p.read_text()) for p in files}


def claim(checkpoint: Path) -> None:
    """Mark a new checkpoint as this plan's; refuse one that an earlier plan wrote (see :data:`PLAN`)."""
    plan = checkpoint / "featurehouse" / "plan"
    if plan.exists() and plan.read_text().strip() == PLAN:
        return
    offsets = checkpoint / "offsets"
    if offsets.is_dir() and any(offsets.iterdir()):
        folder = checkpoint.parent
        raise ConfigError(
            f"the checkpoint {checkpoint} was written by the stream's previous plan (a stream-stream join "
            "whose state holds whole impressions), which this version cannot resume. Reset it: move "
            f"{checkpoint} and {folder / 'staging'} aside (e.g. `mv {checkpoint} "
            f"{checkpoint}.old`) and run the same command again: it reads the sources from their start, "
            f"and the days already decided ({folder / 'days'}) stay decided. See docs/streaming.md, "
            "'Checkpoints of the previous plan'")  # fmt: skip
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_text(PLAN + "\n")
