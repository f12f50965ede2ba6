"""Write-audit-publish: a partition reaches its feature table only after it passed the quality gate.

    staged = stage(spark, rows, staging_table(dataset, ds, run_id))     # write: a private Delta table
    report = validate(spark.table(staged), registry, ds, history)      # audit (warehouse/quality.py)
    publish(spark, "featurehouse.ads", staged, ds)                     # publish: one atomic commit

Each run stages into a table of its own, ``featurehouse_staging.<dataset>_<yyyymmdd>_<run>``, so
concurrent runs never touch each other's staging. A published partition's staging table is
dropped; a refused one is kept for inspection until it is published with
``featurehouse publish`` (after a fix, or ``--force``) or dropped by hand. Every decision is a
row of ``featurehouse_catalog.quality_gate``; the JSON report of each validation is written to
``<home>/quality/<dataset>/ds=<ds>/<run_id>.json``.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from schemas.catalog import QUALITY_GATE, QUALITY_GATE_SCHEMA, catalog_table
from schemas.errors import ConfigError, TableError, first_line
from schemas.names import format_ds, validate_name
from schemas.registry import DatasetRegistry
from warehouse.quality import QualityReport, trailing_history, validate
from warehouse.catalog import ensure_catalog_table
from warehouse.tables import CONFLICTS, CommitMetrics, replace_partition, retry_conflicts

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


def publish(spark: SparkSession, table: str, staged: str, ds: str) -> CommitMetrics:
    """Replace partition ``ds`` of ``table`` with the staged rows in one Delta commit.

    A conflict with a concurrent writer of the same table (Delta's optimistic concurrency)
    is retried: the replace is of the whole ds from the same staged rows, so whichever
    commit lands last, the partition holds exactly one copy of one run's rows.
    """
    try:
        return retry_conflicts(lambda: replace_partition(spark, table, spark.table(staged), ds), attempts=ATTEMPTS)
    except CONFLICTS as err:
        raise TableError(
            f"publishing ds {ds} of {staged} into {table} lost to concurrent writers {ATTEMPTS} times "
            f"({first_line(err)}); nothing was published by this run and {staged} is kept: rerun "
            "`featurehouse publish` for this ds when the other writers are done"
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
    report: QualityReport
    report_path: Path
    commit: CommitMetrics | None  # None: refused, nothing published

    @property
    def published(self) -> bool:
        return self.commit is not None


def audit_and_publish(spark: SparkSession, registry: DatasetRegistry, *, table: str, staged: str, day: dt.date,
                      run_id: str, home: Path, rows: int, quarantined: tuple[int | None, int | None],
                      say: Callable[[str], None] = lambda _line: None) -> GateOutcome:  # fmt: skip
    """The gate on a staged partition: validate it against the trailing history of ``table``, write the
    report, publish it if it passed, record the decision, then drop a published run's staging table
    (only after the record: a crash before leaves the staged rows to inspect).

    ``quarantined``: the run's bad (impression, label) records, for the record; None where not counted.
    """
    ds = format_ds(day)
    say(f"{registry.dataset} ds={ds}: validating {staged} (quality gate)")
    report = validate(spark.table(staged), registry, day, trailing_history(spark, table, registry, day))
    report_path = write_report(home, report, run_id)
    commit = None
    if report.success:
        say(f"{registry.dataset} ds={ds}: publishing into {table}")
        commit = publish(spark, table, staged, ds)
    record(spark, GateRecord(
        dataset=registry.dataset, ds=ds, run_id=run_id,
        decision=Decision.PUBLISHED if report.success else Decision.REFUSED, staging_table=staged,
        expectations=len(report.checks), failed_expectations=tuple(c.line() for c in report.failures), rows=rows,
        decided_by="quality gate", report_path=str(report_path), table_version=commit.version if commit else None,
        quarantined_impressions=quarantined[0], quarantined_labels=quarantined[1],
    ))  # fmt: skip
    if commit is not None:
        drop_staging(spark, staged)
    return GateOutcome(report, report_path, commit)


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
