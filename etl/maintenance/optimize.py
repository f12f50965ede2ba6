"""Order a feature table's columns by popularity and rewrite partitions to follow it, one verified commit each.

    featurehouse optimize --dataset ads --order popularity                             # every partition
    featurehouse optimize --dataset ads --order popularity --from 2026-11-01 --to 2026-11-07
    featurehouse optimize --dataset ads --dry-run                                      # the order, and what would go
    spark-submit etl/maintenance/optimize.py --dataset ads --order popularity

Meta's DLRM data pipeline (ISCA 2022) stores the features jobs read together next to each other, so
a reader's coalesced ranged reads fetch one job's columns in fewer requests (``bench/column_order.py``
measures it). Popularity is the catalog's ``featurehouse_catalog.feature_popularity``: how many
distinct jobs read each feature in the last 30 days (``jobs_30d``), most popular first, ties in
registry order. Only the feature columns move: the keys, the labels and ``ds`` (every column that is
not a registered feature) keep their positions, so ``SELECT *`` starts as before, and the columns the
jobs filter on stay among the first 32, those Delta gives data-skipping statistics
(``delta.dataSkippingNumIndexedCols``).

1. **The table's order** (metadata only: the table uses column mapping by name, so
   ``ALTER TABLE ... ALTER COLUMN c AFTER x`` moves no data; one commit per column moved). New
   partitions (the label join writes in the table's order) follow it from then on.
2. **Each chosen partition** (``--from``/``--to``, default every one) whose Parquet files are not
   already in that order (read from their footers, without Spark) is rewritten whole with Delta's
   replaceWhere on its ds: one commit. It is then verified against the version before it: the same
   row count and content checksum (the sum over rows of ``xxhash64`` of every column), the new files'
   columns in the order, and every file of the version before still on disk, so a reader pinned to
   it keeps reading (Delta keeps them until a VACUUM past the table's file retention). A failed check
   stops the job and names the version to ``RESTORE`` from.

Idempotent: a second run finds the order in place and every file following it, and writes nothing.
With no usage in the catalog there is no order to follow: the job says so and changes nothing. Rewrite a
partition only when no label join writes the same ds (a conflict stops the job; run it again).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from schemas.config import DatasetJobConfig
from schemas.delta_snapshot import Snapshot, open_snapshot
from schemas.errors import ConfigError, TableError
from schemas.names import format_ds, parse_ds
from schemas.paths import local_path, warehouse_location
from schemas.progress import Progress, silent, stderr_progress
from schemas.registry import PARTITION_COLUMN, DatasetRegistry
from warehouse.command import run_spark_job
from warehouse.flags import add_common_arguments, add_engine_argument, common_settings, engine_settings
from warehouse.tables import (
    CONFLICTS, DATABASE, current_version, replace_partition, retry_conflicts, table_location, table_name, table_properties,
)  # fmt: skip

POPULARITY_VIEW = "featurehouse_catalog.feature_popularity"
#: Delta's default of ``delta.dataSkippingNumIndexedCols``: the leading columns that get file statistics.
DEFAULT_INDEXED_COLUMNS = 32
FOOTER_THREADS = 16


class ColumnOrder(StrEnum):
    POPULARITY = "popularity"  # distinct jobs reading a feature in the last 30 days, most first


@dataclass(frozen=True, kw_only=True)
class OptimizeConfig(DatasetJobConfig):
    order: ColumnOrder = ColumnOrder.POPULARITY
    start: dt.date | None = None  # None: from the first partition
    end: dt.date | None = None  # None: to the last partition
    dry_run: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "order", ColumnOrder(self.order))
        if self.start and self.end and self.end < self.start:
            raise ConfigError(f"--to {self.end} is before --from {self.start}; give the range in order")

    def chosen(self, ds: str) -> bool:
        return (self.start is None or ds >= format_ds(self.start)) and (self.end is None or ds <= format_ds(self.end))

    def range_text(self) -> str:
        return f"ds {self.start or 'first'} .. {self.end or 'last'}"

    def check_inputs(self) -> None:
        """The registry; on a local warehouse whose table exists, that the range holds a partition (no JVM)."""
        self.registry()
        warehouse = self.spark_conf.get("spark.sql.warehouse.dir") or warehouse_location(self.home)
        folder = local_path(f"{str(warehouse).rstrip('/')}/{DATABASE}.db/{self.dataset}")
        if (self.start or self.end) and folder is not None and (folder / "_delta_log").is_dir():
            check_range(self, table_name(self.dataset), partitions_of(str(folder)))


def partitions_of(table_uri: str, *, version: int | None = None) -> list[str]:
    """The table's partitions (ds values with files) at ``version``, from its Delta log (``deltalake``, no JVM)."""
    import deltalake
    import pyarrow as pa

    actions = pa.table(deltalake.DeltaTable(table_uri, version=version).get_add_actions(flatten=True))
    column = f"partition.{PARTITION_COLUMN}"
    return sorted(set(actions.column(column).to_pylist())) if column in actions.column_names else []


def check_range(config: OptimizeConfig, table: str, partitions: Sequence[str]) -> list[str]:
    """The partitions of ``config``'s range; none there is a TableError naming those the table has."""
    chosen = [ds for ds in partitions if config.chosen(ds)]
    if not chosen and (config.start or config.end):
        has = f"its {len(partitions)} partitions are ds {partitions[0]} .. {partitions[-1]}" if partitions else "it has none"
        raise TableError(f"{table} has no partition in {config.range_text()} ({has}); choose --from/--to within them")
    return chosen


# --------------------------------------------------------------------------- the order (no Spark)


def popularity_order(registry: DatasetRegistry, columns: Sequence[str], jobs: Mapping[str, int]) -> list[str]:
    """``columns`` with the registry's features among them sorted by ``jobs`` (most first, ties in registry
    order) in the slots features hold now; every other column (keys, labels, ds) keeps its position.

    With features a, b, c registered in that order: ``popularity_order(registry, ["id", "a", "b", "c", "ds"],
    {"c": 2, "a": 1}) == ["id", "c", "a", "b", "ds"]``.
    """
    rank = {f.name: i for i, f in enumerate(registry.stored_features)}
    features = [c for c in columns if c in rank]
    ranked = iter(sorted(features, key=lambda c: (-jobs.get(c, 0), rank[c])))
    return [next(ranked) if c in rank else c for c in columns]


def moves(current: Sequence[str], target: Sequence[str]) -> list[tuple[str, str | None]]:
    """``(column, after)`` steps (``after`` None: FIRST) that turn ``current`` into ``target``; a column already
    behind the one before it in ``target`` is not moved."""
    order, steps = list(current), []
    for i, name in enumerate(target):
        if order[i] != name:
            order.remove(name)
            order.insert(i, name)
            steps.append((name, target[i - 1] if i else None))
    return steps


def _file_columns(uri: str) -> list[str]:
    import pyarrow.parquet as pq
    from pyarrow import fs as pafs

    filesystem, path = pafs.FileSystem.from_uri(uri)
    return list(pq.read_schema(path, filesystem=filesystem).names)


def out_of_order(snapshot: Snapshot, target: Sequence[str]) -> dict[str, int]:
    """Per ds of ``snapshot``, how many of its files do not hold their columns in ``target``'s order (footers)."""
    physical = [snapshot.physical[c] for c in target if c in snapshot.physical]
    if not snapshot.files:
        return {}
    with ThreadPoolExecutor(max_workers=min(FOOTER_THREADS, len(snapshot.files))) as pool:
        names = list(pool.map(_file_columns, [f.uri for f in snapshot.files]))
    bad: dict[str, int] = {f.ds: 0 for f in snapshot.files}
    for file, columns in zip(snapshot.files, names, strict=True):
        present = set(columns)
        if [c for c in columns if c in set(physical)] != [c for c in physical if c in present]:
            bad[file.ds] += 1
    return bad


def missing_files(snapshot: Snapshot) -> list[str]:
    """The files of ``snapshot`` no longer on disk (a pinned reader of its version would fail on them)."""
    from pyarrow import fs as pafs

    gone = []
    for file in snapshot.files:
        filesystem, path = pafs.FileSystem.from_uri(file.uri)
        if filesystem.get_file_info(path).type == pafs.FileType.NotFound:
            gone.append(file.uri)
    return gone


# --------------------------------------------------------------------------- Spark side


def feature_jobs(spark: SparkSession, dataset: str) -> dict[str, int]:
    """Distinct jobs that read each feature of ``dataset`` in the last 30 days (the catalog's view); {} without
    a catalog."""
    if not spark.catalog.tableExists(POPULARITY_VIEW):
        return {}
    # the DataFrame API, not a parameter marker: Spark 4.2 leaves one in a query over a view unbound
    rows = spark.table(POPULARITY_VIEW).where(F.col("dataset") == dataset).select("feature", "jobs_30d").collect()
    return {r["feature"]: int(r["jobs_30d"]) for r in rows if r["jobs_30d"]}


def checksum(frame: DataFrame, columns: Sequence[str]) -> tuple[int, int]:
    """Rows and the sum over rows of ``xxhash64`` of ``columns`` (in that order): equal content, equal sums."""
    row = frame.agg(F.count(F.lit(1)).alias("rows"),
                    F.coalesce(F.sum(F.xxhash64(*columns).cast("decimal(38,0)")), F.lit(0)).alias("sum")).first()  # fmt: skip
    return int(row["rows"]), int(row["sum"])


@dataclass(frozen=True)
class PartitionResult:
    ds: str
    rows: int
    files_before: int
    files_out_of_order: int
    version: int | None = None  # the commit; None: already in order (or a dry run)
    files_after: int = 0
    seconds: float = 0.0

    def format(self, dry_run: bool) -> str:
        if not self.files_out_of_order:
            return f"ds={self.ds}: {self.files_before} files already in order, nothing written"
        if self.version is None:
            return f"ds={self.ds}: would rewrite ({self.files_out_of_order} of {self.files_before} files out of order)"
        return (f"ds={self.ds}: {self.rows:,} rows rewritten, {self.files_before} -> {self.files_after} files, Delta "
                f"version {self.version}; rows and checksum identical, files in order, the version before's files "
                f"kept for pinned readers ({self.seconds:.1f}s)")  # fmt: skip


def rewrite_partition(spark: SparkSession, table: str, location: str, ds: str, target: Sequence[str],
                      checked: Sequence[str]) -> tuple[int, int, int]:  # fmt: skip
    """Rewrite partition ``ds`` in the table's (new) order: one commit, then verified. -> (rows, version, files)."""
    version = current_version(spark, table)
    before = spark.read.option("versionAsOf", version).table(table).where(F.col(PARTITION_COLUMN) == ds)
    old = checksum(before, checked)
    try:
        commit = replace_partition(spark, table, before, dt.date.fromisoformat(ds))
    except CONFLICTS as err:
        raise TableError(f"another writer committed to {table} ds={ds} while it was rewritten ({type(err).__name__}); "
                         "nothing was written for it: run featurehouse optimize again when that write is done") from err  # fmt: skip
    problems = []
    new = checksum(spark.read.option("versionAsOf", commit.version).table(table).where(F.col(PARTITION_COLUMN) == ds),
                   checked)  # fmt: skip
    if new[0] != old[0]:
        problems.append(f"{new[0]:,} rows instead of {old[0]:,}")
    elif new != old:
        problems.append("the content checksum differs")
    written = open_snapshot(location, [dt.date.fromisoformat(ds)], version=commit.version)
    if any(out_of_order(written, target).values()):
        problems.append("its new files are not in the table's column order")
    gone = missing_files(open_snapshot(location, [dt.date.fromisoformat(ds)], version=version))
    if gone:
        problems.append(f"{len(gone)} files of version {version} are gone (e.g. {gone[0]}), so a reader pinned to it fails")
    if problems:
        raise TableError(
            f"optimize of {table} ds={ds} wrote version {commit.version} but its check failed: {'; '.join(problems)}. "
            f"Undo it with RESTORE TABLE {table} TO VERSION AS OF {version} (if nothing else was written since) "
            "and report the bug"
        )
    return old[0], commit.version, len(written.files)


@dataclass(frozen=True)
class OptimizeSummary:
    table: str
    config: OptimizeConfig
    jobs: Mapping[str, int]
    order: tuple[str, ...]
    moved: tuple[str, ...]  # columns moved by ALTER (or that would be, in a dry run)
    versions: tuple[int, int]  # of the table before and after the run
    indexed: str  # which columns get data-skipping statistics
    partitions: tuple[PartitionResult, ...]
    elapsed_s: float

    def format(self) -> str:
        mode = " (dry run: nothing written)" if self.config.dry_run else ""
        head = f"optimize {self.table}: order {self.config.order.value}, {self.config.range_text()}{mode}"
        if not self.jobs:
            return "\n".join([head, f"  no job read a feature of {self.config.dataset} in the last 30 days ({POPULARITY_VIEW}"
                              " is empty for it), so there is no popularity to order by: table left as it is. Reads are"
                              " recorded by featurehouse read / train; run this once jobs have read the dataset"])  # fmt: skip
        popular = [f"{c} ({self.jobs[c]})" for c in self.order if c in self.jobs]
        if not self.moved:
            columns = "column order: already in popularity order"
        else:
            columns = (f"column order: {'would move' if self.config.dry_run else 'moved'} {len(self.moved)} columns "
                       f"(metadata only): {', '.join(self.moved)}")  # fmt: skip
        rewritten = [p for p in self.partitions if p.version is not None]
        pending = [p for p in self.partitions if p.files_out_of_order]
        lines = [
            head,
            f"  most read first (jobs in 30 days): {', '.join(popular)}; the others keep registry order",
            f"  {columns}; keys, labels and ds keep their positions",
            f"  statistics: {self.indexed}",
            *(f"  {p.format(self.config.dry_run)}" for p in self.partitions),
            (f"  {len(pending)} partitions to rewrite" if self.config.dry_run else f"  {len(rewritten)} partitions rewritten")
            + f", {len(self.partitions) - len(pending)} already in order; Delta version {self.versions[0]} -> "
            f"{self.versions[1]}",
            f"  elapsed {self.elapsed_s:.1f}s",
        ]  # fmt: skip
        return "\n".join(lines)


def _indexed(properties: Mapping[str, str], order: Sequence[str]) -> str:
    if properties.get("delta.dataSkippingStatsColumns"):
        return f"the columns of delta.dataSkippingStatsColumns ({properties['delta.dataSkippingStatsColumns']}), any order"
    n = int(properties.get("delta.dataSkippingNumIndexedCols", DEFAULT_INDEXED_COLUMNS))
    stored = [c for c in order if c != PARTITION_COLUMN]  # ds is a partition value, filtered without statistics
    return f"the first {n} columns ({', '.join(stored[:3])}, ... {stored[min(n, len(stored)) - 1]})" if n >= 0 else "every column"


def run(spark: SparkSession, config: OptimizeConfig, *, progress: Progress | None = None) -> OptimizeSummary:
    """Order ``config.dataset``'s table by popularity and rewrite the chosen partitions (see the module docstring)."""
    started = time.monotonic()
    say = progress or silent
    registry = config.registry()
    table = table_name(config.dataset)
    if not spark.catalog.tableExists(table):
        raise TableError(f"table {table} does not exist; write a partition first "
                         f"(featurehouse label-join --dataset {config.dataset} --ds ...)")  # fmt: skip
    location, _provider = table_location(spark, table)
    first = current_version(spark, table)
    chosen = check_range(config, table, partitions_of(location, version=first))
    jobs = feature_jobs(spark, config.dataset)
    current = [f.name for f in spark.table(table).schema.fields]
    if not jobs:
        say(f"{table}: no usage of {config.dataset} in {POPULARITY_VIEW}; nothing to order by")
        return OptimizeSummary(table, config, jobs, tuple(current), (), (first, first), "", (), time.monotonic() - started)
    target = popularity_order(registry, current, jobs)
    steps = moves(current, target)
    say(f"{table}: {len(jobs)} features read in the last 30 days; {len(steps)} columns to move")
    if not config.dry_run:
        for name, after in steps:
            position = f"AFTER {after}" if after else "FIRST"
            say(f"  ALTER TABLE {table} ALTER COLUMN {name} {position}")
            retry_conflicts(lambda name=name, position=position: spark.sql(
                f"ALTER TABLE {table} ALTER COLUMN {name} {position}"))  # fmt: skip
        now = [f.name for f in spark.table(table).schema.fields]
        if now != target:
            raise TableError(f"{table}'s columns are {', '.join(now)} after the reorder, not {', '.join(target)}; "
                             "a concurrent schema change? run featurehouse optimize again")  # fmt: skip
    checked = sorted(current)  # the checksum's columns, in a fixed order (xxhash64 depends on it)
    snapshot = open_snapshot(location, [dt.date.fromisoformat(ds) for ds in chosen])
    unordered = out_of_order(snapshot, target)
    files = {ds: sum(1 for f in snapshot.files if f.ds == ds) for ds in chosen}
    results = []
    for i, ds in enumerate(chosen, start=1):
        result = PartitionResult(ds, 0, files[ds], unordered.get(ds, 0))
        if result.files_out_of_order and not config.dry_run:
            say(f"rewrite {table} ds={ds} ({i}/{len(chosen)}): {result.files_out_of_order} of {files[ds]} files out of order")
            began = time.monotonic()
            rows, version, after = rewrite_partition(spark, table, location, ds, target, checked)
            result = PartitionResult(ds, rows, files[ds], result.files_out_of_order, version, after,
                                     time.monotonic() - began)  # fmt: skip
        say(f"  {result.format(config.dry_run)}")
        results.append(result)
    indexed = _indexed(table_properties(spark, table), target)
    last = current_version(spark, table)
    return OptimizeSummary(table, config, jobs, tuple(target), tuple(n for n, _ in steps), (first, last), indexed,
                           tuple(results), time.monotonic() - started)  # fmt: skip


def parse_args(argv: Sequence[str] | None = None) -> OptimizeConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse optimize",
        description="Order featurehouse.<dataset>'s feature columns by popularity (distinct jobs reading each in the "
        "last 30 days, from featurehouse_catalog.feature_popularity; keys, labels and ds stay where they are) with "
        "metadata-only ALTER COLUMN ... AFTER, then rewrite each chosen partition whose files are not in that order: "
        "one Delta commit per partition (replaceWhere on ds), verified to hold the same rows and values. Readers "
        "pinned to an older version keep reading (VACUUM removes the old files only after the table's file "
        "retention). Partitions already in order are skipped, so a second run writes nothing.",
    )
    parser.add_argument("--dataset", required=True, help="dataset name; its registry is <registry-dir>/<dataset>.yaml")
    parser.add_argument("--order", choices=[o.value for o in ColumnOrder], default=ColumnOrder.POPULARITY.value,
                        help="the column order: popularity (default), most-read features first, ties in registry order")
    parser.add_argument("--from", dest="start", help="first ds to rewrite, YYYY-MM-DD (default: the first partition)")
    parser.add_argument("--to", dest="end", help="last ds to rewrite, YYYY-MM-DD, inclusive (default: the last one)")
    parser.add_argument("--dry-run", action="store_true",
                        help="only show the order and which partitions would be rewritten; write nothing")
    add_common_arguments(parser)
    add_engine_argument(parser)
    ns = parser.parse_args(argv)
    return OptimizeConfig(
        dataset=ns.dataset,
        order=ColumnOrder(ns.order),
        start=None if ns.start is None else parse_ds(ns.start, what="--from"),
        end=None if ns.end is None else parse_ds(ns.end, what="--to"),
        dry_run=ns.dry_run,
        **common_settings(ns), **engine_settings(ns),
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run_spark_job(lambda: parse_args(argv), lambda spark, config: run(spark, config, progress=stderr_progress))


if __name__ == "__main__":
    raise SystemExit(main())
