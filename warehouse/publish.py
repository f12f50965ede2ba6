"""Write-audit-publish: a partition reaches its feature table only after it passed the quality gate.

    gate = audit_and_publish(spark, registry, rows, table="featurehouse.ads", day=ds, run_id=run_id, home=home)

The caller computes the partition's rows once and persists them (Spark memory, spilling to local
disk); the gate validates that copy (``warehouse/quality.py``) and, if it passed, writes the same copy
into the feature table: one Delta commit that replaces the ds and touches no other. The rows are
written once, straight into the table; nothing is staged and copied on the way.

A refused partition is written instead to a table of its own run,
``featurehouse_staging.<dataset>_<yyyymmdd>_<run>``, kept for inspection until it is published
with ``featurehouse publish`` (after a fix, or ``--force``: the same function, given the staged
rows) or dropped by hand. Every decision is a row of ``featurehouse_catalog.quality_gate``; the
JSON report of each validation is written to ``<home>/quality/<dataset>/ds=<ds>/<run_id>.json``.

The guarantee: only rows that passed (or were forced) become visible, all of them in one
commit, and they are the validated rows: validation and the write read the same persisted
blocks; a block lost in between (an executor lost on a cluster) is recomputed from the same
closed landing partitions by deterministic steps (the dedup orders by event time, file and line).
A run killed before its commit leaves the table as it was (Delta ignores uncommitted files).

The catalog's statistics of a published partition (``featurehouse_catalog.feature_stats``, see
``warehouse/stats.py``) are computed from the same persisted rows, and written after the decision
is recorded. Delta has no commit across tables:
a run killed between the publish and the statistics' write leaves the partition published and its
decision recorded, with the statistics of the run before it (their ``table_version`` older than
the partition's) or none; ``featurehouse catalog stats`` recomputes them. ``stats=False`` skips them
(``featurehouse label-join --no-stats``), to the same effect. A table on object storage gets none
yet: the statistics read its Delta log and Parquet footers with ``deltalake`` and pyarrow, which are
given no credentials for it (an open limit; ``catalog stats`` has it too).
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from schemas.catalog import QUALITY_GATE, QUALITY_GATE_SCHEMA, catalog_table
from schemas.errors import ConfigError, TableError
from schemas.exit import first_line
from schemas.names import format_ds, validate_name
from schemas.paths import local_path
from schemas.progress import Progress, silent
from schemas.registry import DatasetRegistry
from warehouse.quality import History, QualityReport, trailing_history, validate
from warehouse.catalog import ensure_catalog_table
from warehouse.stats import PartitionStats, published_stats, write_partition_stats
from warehouse.tables import CONFLICTS, CommitMetrics, replace_partition, retry_conflicts, table_location

STAGING_DATABASE = "featurehouse_staging"
ATTEMPTS = 4


RUN_ID_PATTERN = re.compile(r"^[0-9a-f]{12}$")


class Decision(StrEnum):
    PUBLISHED = "published"
    REFUSED = "refused"
    FORCED = "forced"


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(run_id or ""):
        raise ConfigError(f"run id {run_id!r} is not a run id (12 hex digits, e.g. 3f2a9c0d41be); "
                          "find it in featurehouse_catalog.quality_gate")  # fmt: skip
    return run_id


def staging_table(dataset: str, day: dt.date, run_id: str) -> str:
    """``featurehouse_staging.<dataset>_<yyyymmdd>_<run_id>``: one run's staged partition."""
    return f"{STAGING_DATABASE}.{validate_name('dataset', dataset)}_{day:%Y%m%d}_{check_run_id(run_id)}"


def stage(spark: SparkSession, rows: DataFrame, table: str) -> None:
    """Write ``rows`` as the new Delta table ``table`` (the run's own)."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {STAGING_DATABASE}")
    rows.writeTo(table).using("delta").create()


def publish(spark: SparkSession, table: str, rows: DataFrame, ds: dt.date, *, source: str) -> CommitMetrics:
    """Replace partition ``ds`` of ``table`` with ``rows`` in one Delta commit.

    A conflict with a concurrent writer of the same table (Delta's optimistic concurrency)
    is retried: the replace is of the whole ds from the same rows, so whichever commit lands
    last, the partition holds exactly one copy of one run's rows. ``source`` names the rows
    in the error (the run's staging table, kept or to be kept).
    """
    try:
        return retry_conflicts(lambda: replace_partition(spark, table, rows, ds), attempts=ATTEMPTS)
    except CONFLICTS as err:
        raise TableError(
            f"publishing ds {format_ds(ds)} into {table} lost to concurrent writers {ATTEMPTS} times "
            f"({first_line(err)}); nothing was published by this run: rerun it when the other writers are done "
            f"(a refused run's rows stay in {source} for `featurehouse publish`)"
        ) from err


def drop_staging(spark: SparkSession, staged: str) -> None:
    spark.sql(f"DROP TABLE IF EXISTS {staged}")


def write_report(home: Path, report: QualityReport, run_id: str) -> Path:
    """The validation's JSON (every expectation, with Great Expectations' own result) under ``home``."""
    path = Path(home) / "quality" / validate_name("dataset", report.dataset) / f"ds={report.ds}" / f"{run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(report.as_json())
    tmp.replace(path)
    return path


@dataclass(frozen=True)
class GateRecord:
    """One decision of the gate, as a row of ``featurehouse_catalog.quality_gate``."""

    dataset: str
    ds: str
    run_id: str
    decision: str
    staging_table: str
    expectations: int
    failed_expectations: tuple[str, ...]
    rows: int
    decided_by: str
    report_path: str | None = None
    table_version: int | None = None
    quarantined_impressions: int | None = None
    quarantined_labels: int | None = None
    reason: str | None = None
    decided_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))


def record(spark: SparkSession, entry: GateRecord) -> None:
    """Append one decision to ``featurehouse_catalog.quality_gate`` (created if missing)."""
    table = ensure_catalog_table(spark, QUALITY_GATE)
    schema = from_arrow_schema(QUALITY_GATE_SCHEMA, prefer_timestamp_ntz=False)
    row = {name: getattr(entry, name) for name in schema.fieldNames()}
    row["failed_expectations"] = list(entry.failed_expectations)
    # An append conflicts only with a metadata change; repeating it adds the row once.
    retry_conflicts(lambda: spark.createDataFrame([row], schema).writeTo(table).append(), attempts=ATTEMPTS)


@dataclass(frozen=True)
class GateOutcome:
    report: QualityReport | None  # None: forced, not validated
    report_path: Path | None
    commit: CommitMetrics | None  # None: refused, nothing published
    staged: str  # the run's staging table: holds the rows of a refused run; a published one's is gone
    stats: PartitionStats | None = None  # the published partition's catalog statistics, once written
    stats_skipped: str | None = None  # why a published partition has none: said in the summaries

    @property
    def published(self) -> bool:
        return self.commit is not None


@dataclass(frozen=True)
class Override:
    """A publish on purpose of rows that failed the gate: who, why, and the failures it overrides."""

    by: str
    reason: str
    failed: tuple[str, ...]  # the refused run's failed expectations, one line each
    expectations: int  # how many the refused run was validated against
    report_path: str | None  # the refused run's report


def audit_and_publish(spark: SparkSession, registry: DatasetRegistry, rows: DataFrame, *, table: str, day: dt.date,
                      run_id: str, home: Path, quarantined: tuple[int | None, int | None] = (None, None),
                      staged: str | None = None, override: Override | None = None, stats: bool = True,
                      judged: QualityReport | None = None, history: History | None = None,
                      progress: Progress = silent) -> GateOutcome:  # fmt: skip
    """The gate on one partition's ``rows``: validate them against the trailing history of ``table``, write
    the report, publish them if they passed, record the decision.

    ``rows`` are read twice (validated, then written): pass a persisted frame
    (:func:`warehouse.tables.persisted`) or a table, so that the rows written are the rows validated.

    ``staged``: the rows come from this existing staging table (``featurehouse publish``); it is
    dropped once published, after the record. Otherwise a refused partition is written to the
    run's staging table, and a published one never is. ``override``: publish without validating.
    ``quarantined``: the run's bad (impression, label) records, for the record; None where not counted.
    ``judged``: the rows' report, judged already with the history the days before them left
    (:func:`warehouse.quality.judge`, from a metrics pass over several days): it is not validated again.
    ``history``: the trailing history of ``table`` before ``day`` (:func:`warehouse.quality.history_before`), read
    already by the caller; by default it is read here (:func:`warehouse.quality.trailing_history`).
    ``stats``: once published, compute the partition's catalog statistics from ``rows`` (two more passes
    over them) and write them; see the module docstring.
    """
    ds = format_ds(day)
    if judged is not None and judged.ds != ds:
        raise ValueError(f"the report judged ds {judged.ds}, not {ds}")
    staging = staged or staging_table(registry.dataset, day, run_id)
    report = report_path = None
    if override is None:
        if judged is None:
            progress(f"{registry.dataset} ds={ds}: validating the partition (quality gate)")
        if judged is None and history is None:
            history = trailing_history(spark, table, registry, day)
        report = judged if judged is not None else validate(rows, registry, day, history)
        report_path = write_report(home, report, run_id)
    commit = None
    if override is not None or report.success:
        progress(f"{registry.dataset} ds={ds}: publishing into {table}")
        commit = publish(spark, table, rows, day, source=staging)
    elif staged is None:
        progress(f"{registry.dataset} ds={ds}: refused; keeping the rows in {staging}")
        stage(spark, rows, staging)
    decision = Decision.PUBLISHED if override is None else Decision.FORCED
    record(spark, GateRecord(
        dataset=registry.dataset, ds=ds, run_id=run_id, decision=decision if commit else Decision.REFUSED,
        staging_table=staging, expectations=len(report.checks) if report else override.expectations,
        failed_expectations=tuple(c.line() for c in report.failures) if report else override.failed,
        rows=report.rows if report else commit.rows, decided_by="quality gate" if override is None else override.by,
        report_path=str(report_path) if report else override.report_path, table_version=commit.version if commit else None,
        quarantined_impressions=quarantined[0], quarantined_labels=quarantined[1],
        reason=override.reason if override else None,
    ))  # fmt: skip
    partition_stats, skipped = None, (None if stats else "--no-stats")
    if commit is not None and stats:  # before the staging table is dropped: it may be what ``rows`` reads
        location = table_location(spark, table)[0]
        if local_path(location) is None:  # the snapshot and footers are read with deltalake and pyarrow
            skipped = f"{table} is on object storage ({location}), whose files the statistics do not read yet"
        else:
            progress(f"{registry.dataset} ds={ds}: computing the catalog statistics of the published rows")
            partition_stats = published_stats(registry, rows, table=table, location=location, day=day,
                                              version=commit.version)  # fmt: skip
            partition_stats = replace(partition_stats, catalog_version=write_partition_stats(spark, partition_stats))
    if commit is not None and staged is not None:
        drop_staging(spark, staged)
    return GateOutcome(report, report_path, commit, staging, partition_stats, skipped)


def last_decision(spark: SparkSession, dataset: str, day: dt.date, run_id: str | None = None) -> dict | None:
    """The latest gate decision on ``dataset`` ds ``day`` (of run ``run_id`` if given), or None."""
    from pyspark.sql import functions as F

    table = catalog_table(QUALITY_GATE)
    if not spark.catalog.tableExists(table):
        return None
    rows = spark.table(table).where((F.col("dataset") == dataset) & (F.col("ds") == format_ds(day)))
    if run_id is not None:
        rows = rows.where(F.col("run_id") == run_id)
    latest = rows.orderBy(F.col("decided_at").desc()).limit(1).collect()
    return latest[0].asDict() if latest else None
