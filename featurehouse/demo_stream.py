"""The demo's streaming step: the same landing zone through ``featurehouse stream``, one day compared with batch.

The stream writes the dataset ``<dataset>_stream`` (the same registry under another name, so that
it publishes into a table of its own, ``featurehouse.<dataset>_stream``), reads every landing file
as a file stream (available-now), and publishes each day whose windows closed under its watermark
through the quality gate. The last such day is then compared with the batch job's partition of
the same day, on the columns both tables have.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featurehouse.demo_catalog import dump, registry_as_of
from schemas.progress import stderr_progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def stream_and_compare(spark: SparkSession, home: Path, dataset: str, final: dict[str, Any], day: dt.date,
                       registry_dir: Path, *, rename_on: dt.date) -> str:  # fmt: skip
    """Stream the landing zone into ``<dataset>_stream`` (registry as of ``day``); compare its last published day."""
    from pyspark.sql import functions as F

    from etl.stream import job as stream
    from etl.stream.tables import StreamTables
    from etl.stream.publish import in_process_publisher
    from warehouse.tables import table_name

    name = f"{dataset}_stream"
    staged = registry_as_of(final, day, rename_on=rename_on) | {"dataset": name}
    (registry_dir / f"{name}.yaml").write_text(dump(staged, day))
    tables = StreamTables(home, name)
    spark.sql(f"DROP TABLE IF EXISTS {table_name(name)}")  # left by an earlier demo run
    tables.unregister(spark)
    shutil.rmtree(tables.folder, ignore_errors=True)
    config = stream.StreamConfig(dataset=name, home=home, registry_dir=registry_dir)
    # the demo's session holds the metastore (the engine's, or a classic one's): the stream and its publish step run in it
    summary = stream.run(spark, config, progress=stderr_progress, publisher=in_process_publisher(spark, config))
    lines = [summary.format()]
    published = [r.ds for r in tables.read(spark, "days").where(F.col("decision") == "published").collect()]
    if not published:
        return "\n".join([*lines, "no day closed under the stream's watermark: nothing to compare"])
    last = max(published)
    streamed = spark.table(table_name(name)).where(F.col("ds") == last)
    columns = [c for c in streamed.columns if c in spark.table(table_name(dataset)).columns]
    batch = spark.table(table_name(dataset)).where(F.col("ds") == last).select(*columns)
    streamed = streamed.select(*columns)
    only_stream, only_batch = streamed.exceptAll(batch).count(), batch.exceptAll(streamed).count()
    verdict = "equal row for row" if only_stream == only_batch == 0 else \
        f"NOT EQUAL: {only_stream:,} rows only streamed, {only_batch:,} only in batch"  # fmt: skip
    lines.append(f"ds={last}: {streamed.count():,} streamed rows vs {batch.count():,} batch rows on {len(columns)} "
                 f"columns: {verdict}")  # fmt: skip
    return "\n".join(lines)
