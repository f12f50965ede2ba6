"""Batch label join: one ds of impressions joined with their delayed labels into the feature table.

    featurehouse label-join --dataset ads --ds 2026-11-01
    spark-submit etl/label_join.py --dataset ads --ds 2026-11-01     (see README for packages/confs)

Rules (the contract every training sample relies on):

* The impressions of ``ds`` are joined with the labels of the label partitions
  from ``ds`` through the day on which the longest attribution window of the
  day's last impression closes. A label counts for its impression if
  ``0 <= label_time - impression_time <= window`` of its label type.
* Impressions without a label in a window are negatives (0) for that label type.
* Duplicate impressions (same ``impression_id``) collapse to one: the copy with
  the earliest event time, then the first file path. Duplicate labels collapse too:
  a label type is 1 if any of its copies is in the window.
* Labels whose impression is not in this ds or the days its windows reach back
  over are *orphans*: each label partition's orphans are counted once, by the job
  of that ds, and dropped.
* Logged features not in the registry are counted and dropped; registered
  features missing from a record are null, and so is a feature from its
  ``deprecated_ds`` on. A renamed feature is read under its new or its old name;
  derived features are computed from the record's keys and features.
* New registry features become new columns (partitions written before read
  null); renames and drops wait for ``featurehouse features apply``.
* The label partitions must be closed (``_SUCCESS``) unless ``--allow-open-window``.
* Records that cannot be used (unparseable, wrong types, missing fields, event times outside
  ``ds``, non-finite dense values, unknown label types) and empty files are quarantined with
  their file, line and reason (``etl/records/quarantine.py``); more than ``max_bad_fraction`` of them
  refuses the ds before anything is staged.
* Write, audit, publish (``warehouse/publish.py``): the rows are computed once and persisted,
  validated with the registry's Great Expectations suite, and only a passing ds replaces its
  partition of the feature table, atomically (one Delta commit, written from the validated
  copy); no other ds is touched. A refused ds is kept in a staging table of the run with its
  report, and raises :class:`DataRefusedError` (exit 3).
* A published ds's catalog statistics (``featurehouse_catalog.feature_stats``: counts, nulls,
  min/max/mean, quantiles, list lengths, distinct ids, bytes on disk) come from the same persisted
  rows, written after the publish (``--no-stats`` skips them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from etl.records.attribution import (
    MATCHED_COLUMN,
    OUTSIDE_PREFIX,
    TYPES_COLUMN,
    attribute_labels,
    feature_rows,
    label_count_columns,
    window_days,
)
from etl.records.dedup import dedup_impressions
from etl.records.flatten import flatten_impressions
from etl.records.landing import (
    RAW_COLUMN,
    Landing,
    RecordKind,
    SUCCESS_MARKER,
    bytes_under,
    empty_files,
    empty_labels,
    label_days,
    path_exists,
    read_impressions,
    read_labels,
)
from etl.records.quarantine import (
    VALID_COLUMN,
    empty_file_rows,
    label_valid,
    quarantine_rows,
    with_impression_problem,
    with_label_problem,
    write_quarantine,
)
from schemas.paths import REPO_ROOT, landing_location, local_path
from schemas.catalog import FEATURE_STATS, catalog_table
from schemas.bad_records import bad_fraction_limit, check_max_bad_fraction, too_many_bad
from schemas.config import DatasetJobConfig
from schemas.errors import DataRefusedError, LandingError
from schemas.names import format_ds, parse_ds
from schemas.progress import Progress, silent, stderr_progress
from schemas.registry import DatasetRegistry, load_dataset
from schemas.spark import impression_record_schema
from schemas.sql_text import identifier
from warehouse.command import run_spark_job
from warehouse.confs import input_size_confs, runtime_confs
from warehouse.evolution import prepare_for_write
from warehouse.flags import add_common_arguments, add_engine_argument, common_settings, engine_settings
from warehouse.publish import GateOutcome, audit_and_publish, new_run_id
from warehouse.quality import DayCounts, history_before, import_ahead, published_days, validate_with
from warehouse.spark_jobs import RunJobs, counting_jobs, explain
from warehouse.stats import PartitionStats
from warehouse.tables import CommitMetrics, persisted


@dataclass(frozen=True, kw_only=True)
class LabelJoinConfig(DatasetJobConfig):
    ds: dt.date
    landing: str | None = None
    allow_open_window: bool = False
    max_bad_fraction: float | None = None  # None: the registry's quality.max_bad_fraction
    explain_jobs: bool = False  # the summary lists the run's Spark jobs by call site
    stats: bool = True  # the published ds's catalog statistics (feature_stats), from the same rows

    def __post_init__(self) -> None:
        super().__post_init__()
        check_max_bad_fraction(self.max_bad_fraction)

    @property
    def landing_root(self) -> str:
        return self.landing or landing_location(self.home)

    def check_inputs(self) -> None:
        """The registry, and on a local landing zone the ds's partitions (a session checks those of any other)."""
        registry = self.registry()
        if local_path(self.landing_root) is not None:
            days = label_days(self.ds, registry.max_window)
            check_partitions(Landing(self.landing_root), self, days, exists=lambda path: local_path(path).exists())


@dataclass(frozen=True)
class LabelJoinSummary:
    """What one label join read, quarantined, dropped, staged, validated and published."""

    dataset: str
    ds: str
    table: str
    run_id: str
    label_days: tuple[str, ...]
    window_open: bool
    impressions_read: int
    quarantined_impressions: int
    duplicate_impressions: int
    label_records: int  # of this ds's label partition
    quarantined_labels: int
    quarantine_table: str
    problems: Mapping[str, int]  # problem code -> quarantined records (and empty files)
    rows_out: int
    positives: Mapping[str, int]
    labels_matched: int
    duplicate_labels: int
    labels_outside_window: Mapping[str, int]
    orphan_labels: int
    unknown_features: tuple[str, ...]
    unknown_feature_values: int
    staging_table: str
    gate: tuple[str, ...]  # the quality report's summary lines
    report_path: str
    commit: CommitMetrics | None  # None: not published
    stats: PartitionStats | None  # the catalog statistics written; None: not published, or stats_skipped
    stats_skipped: str | None  # why a published ds has no statistics (--no-stats, object storage)
    elapsed_s: float
    spark_jobs: int  # Spark jobs the run launched
    job_list: tuple[str, ...] = ()  # with --explain-jobs: the jobs by call site (warehouse.spark_jobs.explain)

    @property
    def published(self) -> bool:
        return self.commit is not None

    @property
    def rows_per_second(self) -> float:
        return self.impressions_read / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def format(self) -> str:
        rate = lambda n: f"{n:,} ({n / self.rows_out:.2%})" if self.rows_out else f"{n:,}"  # noqa: E731
        if self.commit is not None:
            head = f"label join {self.dataset} ds={self.ds} -> {self.table} (Delta version {self.commit.version})"
        else:
            head = (f"label join {self.dataset} ds={self.ds}: NOT PUBLISHED, the partition failed the quality gate; "
                    f"{self.table} is unchanged, the rows are kept in {self.staging_table}")  # fmt: skip
        problems = ", ".join(f"{n:,} {code}" for code, n in sorted(self.problems.items(), key=lambda kv: -kv[1]))
        lines = [
            head,
            f"  label partitions   {self.label_days[0]} .. {self.label_days[-1]}"
            + ("  WINDOW OPEN: labels may still arrive" if self.window_open else "  (windows closed)"),
            f"  rows in            {self.impressions_read:,} impression records"
            f" ({self.quarantined_impressions:,} quarantined, {self.duplicate_impressions:,} duplicates)",
            f"  rows out           {self.rows_out:,}",
        ]
        lines += [f"  positives {name:<10} {rate(n)}" for name, n in self.positives.items()]
        lines += [
            f"  labels             {self.labels_matched:,} matched, {self.duplicate_labels:,} duplicates, "
            + ", ".join(f"{n:,} {name} outside window" for name, n in self.labels_outside_window.items()),
            f"  dropped labels     {self.orphan_labels:,} orphans (no impression), {self.quarantined_labels:,} quarantined "
            f"of {self.label_records:,} label records of {self.ds}",
            f"  quarantine         {sum(self.problems.values()):,} -> {self.quarantine_table} (ds={self.ds})"
            + (f": {problems}" if problems else ""),
            f"  unknown features   {len(self.unknown_features)} names, {self.unknown_feature_values:,} values dropped"
            + (f" ({', '.join(self.unknown_features[:5])}{', ...' if len(self.unknown_features) > 5 else ''})"
               if self.unknown_features else ""),
            *(f"  quality gate       {line}" for line in self.gate),
            f"  report             {self.report_path}",
        ]
        if self.commit is not None:
            lines.append(f"  bytes written      {self.commit.bytes:,} in {self.commit.files} files"
                         f" (replaced {self.commit.removed_files} files)")  # fmt: skip
        if self.stats is not None:
            lines.append(f"  statistics         {len(self.stats.features)} features -> {catalog_table(FEATURE_STATS)}"
                         f" (version {self.stats.catalog_version})")  # fmt: skip
        elif self.commit is not None:
            lines.append(f"  statistics         not computed ({self.stats_skipped})")
        lines.append(f"  elapsed            {self.elapsed_s:.1f}s, {self.rows_per_second:,.0f} rows/s, {self.spark_jobs} Spark "
                     f"jobs, run {self.run_id}")  # fmt: skip
        lines += [f"  {line}" for line in self.job_list]
        return "\n".join(lines)


# --------------------------------------------------------------------------- the job


def check_partitions(landing: Landing, config: LabelJoinConfig, days: Sequence[dt.date], *,
                     exists: Callable[[str], bool]) -> bool:  # fmt: skip
    """Refuse to run on a missing impression partition or open label windows; return whether a window is open.

    ``exists`` tells whether a path exists: Hadoop's FileSystem in a session, the local disk before one.
    """
    is_closed = lambda partition: exists(f"{partition}/{SUCCESS_MARKER}")  # noqa: E731
    impression_dir = landing.partition(RecordKind.IMPRESSIONS, config.ds)
    if not exists(impression_dir):
        raise LandingError(
            f"impression partition {impression_dir} does not exist; generate or land the logs of "
            f"{format_ds(config.ds)} first (featurehouse generate), or pick another --ds"
        )
    if not is_closed(impression_dir):
        raise LandingError(
            f"impression partition {impression_dir} is not closed (no _SUCCESS marker): the day's logs are "
            "still arriving; wait for the marker"
        )
    open_days = [d for d in days if not is_closed(landing.partition(RecordKind.LABELS, d))]
    if open_days and not config.allow_open_window:
        first = landing.partition(RecordKind.LABELS, open_days[0])
        raise LandingError(
            f"the attribution windows of ds {format_ds(config.ds)} close only in label partitions "
            f"{format_ds(days[0])} .. {format_ds(days[-1])}, and {len(open_days)} of them are not closed yet "
            f"(first: {first}, missing or without _SUCCESS); wait for them, or pass --allow-open-window to "
            "join the labels present so far (late labels will then be missing)"
        )
    return bool(open_days)


def _impression_ids_before(spark: SparkSession, landing: Landing, table: str, days: Sequence[dt.date],
                           published: Mapping[str, DayCounts]) -> DataFrame:  # fmt: skip
    """Impression ids of earlier ``days``: from the feature table where ``published``, else from the landing zone."""
    published = {format_ds(d) for d in days} & published.keys()
    frames = [spark.table(table).where(F.col("ds").isin(sorted(published))).select("impression_id")]
    unpublished = [d for d in days if format_ds(d) not in published]
    present = [d for d in unpublished if path_exists(spark, landing.partition(RecordKind.IMPRESSIONS, d))]
    if present:
        frames.append(read_impressions(spark, landing, present, StructType().add("impression_id", "string"))
                      .select("impression_id"))  # fmt: skip
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


@dataclass(frozen=True)
class _Quarantined:
    """What the quarantine step found: the day's record counts, bad records by record kind and by problem."""

    impressions_read: int
    label_records: int
    bad: Mapping[str, int]  # record kind -> bad records (empty files not counted)
    problems: Mapping[str, int]  # problem code -> quarantined rows (empty files included)
    table: str
    unknown_features: tuple[str, ...]
    unknown_feature_values: int


def _quarantine(spark: SparkSession, config: LabelJoinConfig, registry: DatasetRegistry, landing: Landing,
                flat: DataFrame, raw_labels: DataFrame, run_id: str, now: dt.datetime) -> _Quarantined:  # fmt: skip
    """Count the day's records and bad records, and replace the day's quarantine rows with its bad ones."""
    ds = format_ds(config.ds)  # the string form: compared with the records' ds column, and in messages
    is_bad = ~F.col(VALID_COLUMN)
    this_day_labels = raw_labels.where(F.col("ds") == ds)
    # both kinds' counts in one job: the impressions' and this ds's labels' judged records, unioned
    is_impression, is_label = F.col("_impression"), ~F.col("_impression")
    records = flat.select(F.lit(True).alias("_impression"), VALID_COLUMN, "_unknown").unionByName(
        this_day_labels.select(F.lit(False).alias("_impression"), VALID_COLUMN,
                               F.lit(None).cast("array<string>").alias("_unknown")))  # fmt: skip
    stats = records.agg(
        F.count_if(is_impression).alias("impressions"),
        F.count_if(is_impression & is_bad).alias("bad_impressions"),
        F.sum(F.when(is_impression & ~is_bad, F.size("_unknown")).otherwise(0)).alias("unknown_values"),
        F.array_distinct(F.flatten(F.collect_set(F.when(is_impression & ~is_bad, F.col("_unknown"))))).alias("unknown_names"),
        F.count_if(is_label).alias("labels"),
        F.count_if(is_label & is_bad).alias("bad_labels"),
    ).first()
    bad = {RecordKind.IMPRESSIONS.value: int(stats["bad_impressions"]), RecordKind.LABELS.value: int(stats["bad_labels"])}
    empties = {kind.value: empty_files(spark, [landing.partition(kind, config.ds)]) for kind in RecordKind}
    rows = empty_file_rows(spark, [], RecordKind.IMPRESSIONS.value, config.ds, run_id, now)
    problems: dict[str, int] = {}
    if any(bad.values()) or any(empties.values()):  # reasons are worked out only when there are bad records
        known_types = [label.name for label in registry.labels]
        rows = (
            quarantine_rows(with_impression_problem(flat.where(is_bad), registry, config.ds), flat,
                            RecordKind.IMPRESSIONS.value, run_id, now)
            .unionByName(quarantine_rows(with_label_problem(this_day_labels.where(is_bad), known_types), raw_labels,
                                         RecordKind.LABELS.value, run_id, now))
            .unionByName(empty_file_rows(spark, empties[RecordKind.IMPRESSIONS.value], RecordKind.IMPRESSIONS.value, config.ds,
                                         run_id, now))
            .unionByName(empty_file_rows(spark, empties[RecordKind.LABELS.value], RecordKind.LABELS.value, config.ds, run_id,
                                         now))
        )  # fmt: skip
        problems = {r["problem"]: r["count"] for r in rows.groupBy("problem").count().collect()}
    table = write_quarantine(spark, config.dataset, config.ds, rows, empty=not problems)
    found = _Quarantined(int(stats["impressions"]), int(stats["labels"]), bad, problems, table,
                         tuple(sorted(stats["unknown_names"] or [])), int(stats["unknown_values"] or 0))  # fmt: skip
    limit = bad_fraction_limit(registry.quality, config.max_bad_fraction)
    for kind, read in ((RecordKind.IMPRESSIONS.value, found.impressions_read), (RecordKind.LABELS.value, found.label_records)):
        if too_many := too_many_bad(bad[kind], read, limit, what=f"{kind.removesuffix('s')} records of ds {ds}"):
            raise DataRefusedError(
                f"{too_many}; nothing was staged or published. They are in {table} "
                f"(SELECT problem, reason, source_file, line FROM {table} WHERE ds = '{ds}'); fix the "
                "logs and rerun, or allow more with --max-bad-fraction (or quality.max_bad_fraction in the registry)",
                details=f"label join {config.dataset} ds={ds}: refused before staging; {found.impressions_read:,} "
                f"impression records ({bad['impressions']:,} bad), {found.label_records:,} label records "
                f"({bad['labels']:,} bad) -> {table}, run {run_id}",
            )
    return found


def run(spark: SparkSession, config: LabelJoinConfig, *, progress: Progress | None = None) -> LabelJoinSummary:
    """Join one ds, quarantine its bad records, validate and publish it; see the module docstring.

    Raises :class:`DataRefusedError` (nothing published) when too many records are bad or the
    partition fails the quality gate.
    """
    with counting_jobs(spark, _job_description(config)) as jobs:
        return _run(spark, config, progress, jobs)


def _job_description(config: LabelJoinConfig) -> str:
    return f"featurehouse label-join {config.dataset} ds={format_ds(config.ds)}"


@dataclass(frozen=True)
class _Plan:
    """What a run settles before it reads a record: the registry, the day's label partitions, the table."""

    run_id: str
    registry: DatasetRegistry
    landing: Landing
    ds: dt.date
    days: tuple[dt.date, ...]  # the label partitions the windows reach
    present_days: tuple[dt.date, ...]  # those of them that exist
    window_open: bool
    table: str
    input_bytes: int  # of the impression and label partitions read


@dataclass(frozen=True)
class _LabelCounts:
    """The summary's label counts: matched, duplicates, outside each window, orphans."""

    matched: int
    duplicates: int
    outside_window: Mapping[str, int]
    orphans: int


def _plan(spark: SparkSession, config: LabelJoinConfig, progress: Progress) -> _Plan:
    """Load the registry, check the landing partitions, and bring the table's schema up to the registry."""
    registry = load_dataset(config.dataset, config.registry_dir)
    landing = Landing(config.landing_root)
    days = label_days(config.ds, registry.max_window)
    window_open = check_partitions(landing, config, days, exists=partial(path_exists, spark))
    present_days = [d for d in days if path_exists(spark, landing.partition(RecordKind.LABELS, d))]
    input_bytes = bytes_under(spark, [landing.partition(RecordKind.IMPRESSIONS, config.ds),
                                      *(landing.partition(RecordKind.LABELS, d) for d in present_days)])  # fmt: skip
    with runtime_confs(spark, input_size_confs(input_bytes), keep_set=True):  # as the rest of the run (see _run)
        table, changes = prepare_for_write(spark, registry)  # reads the table's snapshot: 1 Spark job, 3 with AQE
    for change in changes:
        progress(f"{config.dataset}: {change.action.value} {change.detail}")
    return _Plan(new_run_id(), registry, landing, config.ds, tuple(days), tuple(present_days),
                 window_open, table, input_bytes)  # fmt: skip


def _read(spark: SparkSession, config: LabelJoinConfig, plan: _Plan) -> tuple[DataFrame, DataFrame]:
    """The day's impression records, flattened and judged, and the label records of its label partitions, judged."""
    registry = plan.registry
    records = read_impressions(spark, plan.landing, [config.ds], impression_record_schema(registry))
    labels = read_labels(spark, plan.landing, plan.present_days) if plan.present_days else empty_labels(spark)
    labels = labels.withColumn(VALID_COLUMN, label_valid([label.name for label in registry.labels]))
    labels = labels.withColumn(RAW_COLUMN, F.when(~F.col(VALID_COLUMN), F.col(RAW_COLUMN)))
    return flatten_impressions(records, registry, plan.ds), labels


def _published_before(spark: SparkSession, plan: _Plan) -> dict[str, DayCounts]:
    """The table's published days that the run looks back on, in one read: those the labels' windows reach back
    over (their impressions' ids, for the orphans) and those of the quality gate's history."""
    registry = plan.registry
    back = max(window_days(registry), registry.quality.history_days)
    return published_days(spark, plan.table, registry, plan.ds - dt.timedelta(days=back), plan.ds)


def _label_count_sums(registry: DatasetRegistry) -> dict[str, str]:
    """The sums of the label counts the rows carry (:func:`label_count_columns`), as SQL text: they ride in the
    quality gate's pass over the rows (:func:`warehouse.quality.validate_with`)."""
    sums = {"matched": MATCHED_COLUMN, "distinct_pairs": TYPES_COLUMN,
            **{f"out_{label.name}": OUTSIDE_PREFIX + label.name for label in registry.labels}}  # fmt: skip
    return {name: f"sum({identifier(column)})" for name, column in sums.items()}


def _label_counts(spark: SparkSession, config: LabelJoinConfig, plan: _Plan, rows: DataFrame, labels: DataFrame,
                  published: Mapping[str, DayCounts], sums: Mapping[str, int | None]) -> _LabelCounts:  # fmt: skip
    """The label counts: ``sums``, those of :func:`_label_count_sums` over the persisted ``rows``; and this ds's
    orphan labels."""
    registry = plan.registry
    known_types = [label.name for label in registry.labels]
    lookback = [config.ds - dt.timedelta(days=i) for i in range(1, window_days(registry) + 1)]
    known_ids = rows.select("impression_id").unionByName(
        _impression_ids_before(spark, plan.landing, plan.table, lookback, published))
    orphans = labels.where(F.col("ds") == format_ds(plan.ds)).join(known_ids, "impression_id", "left_anti").count()
    return _LabelCounts(
        matched=int(sums["matched"] or 0),
        duplicates=int(sums["matched"] or 0) - int(sums["distinct_pairs"] or 0),
        outside_window={name: int(sums[f"out_{name}"] or 0) for name in known_types},
        orphans=int(orphans),
    )


def _summary(config: LabelJoinConfig, plan: _Plan, found: _Quarantined, labels: _LabelCounts, gate: GateOutcome,
             *, elapsed_s: float, spark_jobs: int, job_list: tuple[str, ...] = ()) -> LabelJoinSummary:  # fmt: skip
    """The run's summary, from what each step found."""
    report = gate.report
    return LabelJoinSummary(
        dataset=config.dataset,
        ds=format_ds(plan.ds),
        table=plan.table,
        run_id=plan.run_id,
        label_days=tuple(format_ds(d) for d in plan.days),
        window_open=plan.window_open,
        impressions_read=found.impressions_read,
        quarantined_impressions=found.bad["impressions"],
        duplicate_impressions=found.impressions_read - found.bad["impressions"] - report.rows,
        label_records=found.label_records,
        quarantined_labels=found.bad["labels"],
        quarantine_table=found.table,
        problems=found.problems,
        rows_out=report.rows,
        positives={label.name: report.label_sums[label.column] for label in plan.registry.labels},
        labels_matched=labels.matched,
        duplicate_labels=labels.duplicates,
        labels_outside_window=labels.outside_window,
        orphan_labels=labels.orphans,
        unknown_features=found.unknown_features,
        unknown_feature_values=found.unknown_feature_values,
        staging_table=gate.staged,
        gate=tuple(report.summary_lines()),
        report_path=str(gate.report_path),
        commit=gate.commit,
        stats=gate.stats,
        stats_skipped=gate.stats_skipped,
        elapsed_s=elapsed_s,
        spark_jobs=spark_jobs,
        job_list=job_list,
    )


def _run(spark: SparkSession, config: LabelJoinConfig, progress: Progress | None, jobs: RunJobs
         ) -> LabelJoinSummary:  # fmt: skip
    started = time.monotonic()
    import_ahead()  # the gate's library loads while the records are read and joined
    say = progress or silent
    plan = _plan(spark, config, say)
    registry, ds = plan.registry, format_ds(plan.ds)  # ds: the string form, for messages
    now = dt.datetime.now(dt.UTC)

    say(f"{config.dataset} ds={ds}: reading impressions and labels of {format_ds(plan.days[0])} .. "
        f"{format_ds(plan.days[-1])} ({plan.input_bytes:,} bytes)")  # fmt: skip
    flat, raw_labels = _read(spark, config, plan)
    # a small day's plans run interpreted, without AQE (warehouse/confs.py); a setting the user gave is kept
    with runtime_confs(spark, input_size_confs(plan.input_bytes), keep_set=True), \
            persisted(flat) as flat, persisted(raw_labels) as raw_labels:  # fmt: skip
        say(f"{config.dataset} ds={ds}: parsing and quarantining bad records")
        found = _quarantine(spark, config, registry, plan.landing, flat, raw_labels, plan.run_id, now)

        say(f"{config.dataset} ds={ds}: joining labels")
        labels = raw_labels.where(F.col(VALID_COLUMN))
        impressions = dedup_impressions(flat.where(F.col(VALID_COLUMN)), rows=found.impressions_read)
        counted = feature_rows(impressions, attribute_labels(impressions, labels, registry), registry, plan.ds,
                               label_counts=True)  # fmt: skip
        published = _published_before(spark, plan)
        with persisted(counted) as counted:  # computed once: counted, validated and written from the same blocks
            say(f"{config.dataset} ds={ds}: validating the partition (quality gate; its pass computes the joined rows)")
            # the label counts' sums ride in the gate's pass over the rows
            report, sums = validate_with(counted, registry, plan.ds, history_before(published, registry, plan.ds),
                                         extra=_label_count_sums(registry))  # fmt: skip
            flat.unpersist()  # the rows are materialised: the parsed records are no longer needed
            label_counts = _label_counts(spark, config, plan, counted, labels, published, sums)
            rows = counted.drop(*label_count_columns(registry))  # read from the same persisted blocks
            gate = audit_and_publish(spark, registry, rows, table=plan.table, day=config.ds, run_id=plan.run_id,
                                     home=config.home, quarantined=(found.bad["impressions"], found.bad["labels"]),
                                     judged=report, stats=config.stats, progress=say)  # fmt: skip
    elapsed_s = time.monotonic() - started
    job_list = tuple(explain(jobs.listed(), root=str(REPO_ROOT), run=_job_description(config))) \
        if config.explain_jobs else ()  # fmt: skip
    summary = _summary(config, plan, found, label_counts, gate, elapsed_s=elapsed_s, spark_jobs=jobs(),
                       job_list=job_list)  # fmt: skip
    if not gate.report.success:
        report = gate.report
        raise DataRefusedError(
            f"ds {ds} of {config.dataset} failed {len(report.failures)} of {len(report.checks)} quality expectations "
            f"and was not published ({plan.table} is unchanged); the rows are in {gate.staged}, the report in "
            f"{gate.report_path}. Fix the logs and rerun, or publish it on purpose: featurehouse publish --dataset "
            f"{config.dataset} --ds {ds} --force --reason '...'",
            details=summary.format(),
        )
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", required=True, help="dataset name; its registry is <registry-dir>/<dataset>.yaml")
    parser.add_argument("--ds", required=True, help="the impression day to join, YYYY-MM-DD (UTC)")
    parser.add_argument(
        "--landing", default=None, help="landing zone root, a path or URI (default: <home>/landing)"
    )
    parser.add_argument(
        "--max-bad-fraction",
        type=float,
        default=None,
        metavar="F",
        help="refuse the ds if more than this share of its impression or label records is malformed "
        "(default: the registry's quality.max_bad_fraction, 0.01 unless set); bad records are quarantined either way",
    )
    parser.add_argument(
        "--allow-open-window",
        action="store_true",
        help="join even if some label partitions the windows need are not closed yet (late labels are then missing)",
    )
    parser.add_argument(
        "--explain-jobs",
        action="store_true",
        help="list the run's Spark jobs in the summary, by the call site that launched them (ours, Spark's, Delta's)",
    )
    parser.add_argument(
        "--no-stats",
        dest="stats",
        action="store_false",
        help="do not compute the published ds's catalog statistics (featurehouse_catalog.feature_stats); by default "
        "they come from the joined rows, after the publish; `featurehouse catalog stats` computes them later",
    )
    add_common_arguments(parser)
    add_engine_argument(parser)


def config_from_args(ns: argparse.Namespace) -> LabelJoinConfig:
    return LabelJoinConfig(
        dataset=ns.dataset,
        ds=parse_ds(ns.ds),
        landing=ns.landing,
        allow_open_window=ns.allow_open_window,
        max_bad_fraction=ns.max_bad_fraction,
        explain_jobs=ns.explain_jobs,
        stats=ns.stats,
        **common_settings(ns),
        **engine_settings(ns),
    )


def parse_args(argv: Sequence[str] | None = None) -> LabelJoinConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse label-join",
        description="Join one day of impressions with their delayed labels into the Delta table featurehouse.<dataset>: "
        "bad records are quarantined, the day is validated by the quality gate and published only if it "
        "passes (exit 3 when the data is refused).",
    )
    add_arguments(parser)
    return config_from_args(parser.parse_args(argv))


def main(argv: Sequence[str] | None = None) -> int:
    return run_spark_job(lambda: parse_args(argv), lambda spark, config: run(spark, config, progress=stderr_progress))


if __name__ == "__main__":
    raise SystemExit(main())
