"""The landing zone's layout, without Spark: where a ds partition lives, when it is closed, which label
partitions a ds needs. Shared by the Spark jobs (``etl/records/landing.py``) and the Airflow sensors, which must
not import pyspark.

    <landing>/impressions/ds=YYYY-MM-DD/hour=HH/*.jsonl
    <landing>/labels/ds=YYYY-MM-DD/hour=HH/*.jsonl
    <landing>/{impressions,labels}/ds=YYYY-MM-DD/_SUCCESS   <- the ds is complete
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum

from schemas.names import format_ds

SUCCESS_MARKER = "_SUCCESS"


class RecordKind(StrEnum):
    """The kinds of record the landing zone holds, one folder each."""

    IMPRESSIONS = "impressions"
    LABELS = "labels"


@dataclass(frozen=True)
class Landing:
    """The landing zone rooted at ``root`` (a local path or a Hadoop URI)."""

    root: str

    def partition(self, kind: RecordKind, day: dt.date) -> str:
        return f"{self.root.rstrip('/')}/{kind.value}/ds={format_ds(day)}"


def label_days(day: dt.date, max_window: dt.timedelta) -> list[dt.date]:
    """The label partitions that can hold labels of ``day``'s impressions.

    From ``day`` through the day on which the longest window of the day's last
    impression (just before midnight) closes.

    >>> label_days(dt.date(2026, 11, 1), dt.timedelta(hours=1))
    [datetime.date(2026, 11, 1), datetime.date(2026, 11, 2)]
    """
    midnight_after = dt.datetime.combine(day + dt.timedelta(days=1), dt.time())
    last = (midnight_after + max_window - dt.timedelta(microseconds=1)).date()
    return [day + dt.timedelta(days=i) for i in range((last - day).days + 1)]
