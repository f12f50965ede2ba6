"""Duplicate impressions collapsed to one: the earliest event time wins, then the first file, then the first line."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.records.landing import ROW_ID_COLUMN

#: Up to this many impressions a day, the surviving copies' row ids are broadcast to pick them out.
BROADCAST_DEDUP_ROWS = 10_000_000


def dedup_impressions(impressions: DataFrame, *, rows: int | None = None) -> DataFrame:
    """One row per impression_id: the earliest event time wins, then the first source file, then the first line.

    The winner of each id is found on the narrow key columns alone (a hash aggregate of
    ``min(struct(event_time, source_file, split_start, _row_id))``), then the whole rows are kept by
    their unique ``_row_id``: the wide rows are never shuffled when the ids of at most
    :data:`BROADCAST_DEDUP_ROWS` impressions (``rows``, if known) can be broadcast.
    """
    order = F.struct("event_time", "source_file", "split_start", ROW_ID_COLUMN)
    winners = (impressions.groupBy("impression_id").agg(F.min(order).alias("_first"))
               .select(F.col(f"_first.{ROW_ID_COLUMN}").alias(ROW_ID_COLUMN)))  # fmt: skip
    if rows is not None and rows <= BROADCAST_DEDUP_ROWS:
        winners = F.broadcast(winners)
    return impressions.join(winners, ROW_ID_COLUMN, "left_semi")
