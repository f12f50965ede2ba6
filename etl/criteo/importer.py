"""``featurehouse import criteo``: Criteo's published click logs into a date-partitioned feature table.

    featurehouse import criteo --dataset criteo --ds 2026-01-01 --split-days 7 train.txt        # Kaggle
    featurehouse import criteo --dataset criteo_tb --ds 2026-01-01 day_{0..23}.gz               # 1TB
    spark-submit etl/criteo/importer.py criteo --dataset criteo --ds 2026-01-01 --split-days 7 train.txt

Rules:

* The files are read as published (``schemas/criteo.py``): 40 tab-separated fields per line,
  plain or compressed (``.gz``, ``.bz2``: Hadoop's codec by extension). A gzip file is read by
  one task; a plain file is split and read in parallel.
* FILE *i* holds day ``--ds`` + *i* (the 1TB logs' ``day_0`` .. ``day_23``). With ``--split-days
  K`` the one FILE's lines (in time order, as Kaggle's ``train.txt``) are split into K days by
  row ranges as the DLRM reference splits them: of N lines, each day gets N // K, and the first
  N % K days one more. Blank and malformed lines count: a day is a range of line numbers.
* A line is usable if it is ``0`` or ``1``, then 13 fields that are empty or an integer of at
  most 18 digits, then 26 fields that are empty or 8 hex digits. Every other line is quarantined
  in ``featurehouse_quarantine.<dataset>`` with its file, line number (1-based, in the file) and
  reason: ``empty_line``, ``field_count``, ``bad_label``, ``not_integer`` or ``not_hex``.
* Each usable line is one row: ``impression_id`` is ``<file name>:<line>``; ``user_id``,
  ``item_id`` and ``event_time`` are null (the logs have none); ``label_click`` is the label;
  ``int_k`` the integer as float32 (null when empty); ``cat_k`` ``[the hex digits as an integer]``
  (``[]`` when empty).
* The registry ``<registry-dir>/<dataset>.yaml`` is written if it does not exist, and must
  have the Criteo layout if it does (its descriptions, owners and quality may be edited, and
  derived features added).
* Each day is validated and published on its own (write-audit-publish, as a label
  join: ``warehouse/publish.py``), in day order, so each day's gate sees the days before it. The
  metrics of a file's days come from one pass over its rows (``warehouse.quality.metrics_by_day``);
  each day is then judged with the history that the published days before it leave, as a pass
  of its own would judge it. A day with more than ``max_bad_fraction`` malformed lines, no lines,
  or a failed quality gate is not published; the other days are. Then the job exits with status 3
  and says which days.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import reduce
from pathlib import Path, PurePosixPath

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from etl.records.landing import RAW_COLUMN, ROW_ID_COLUMN, bytes_under, path_exists
from etl.records.quarantine import (
    PROBLEM_COLUMN,
    VALID_COLUMN,
    empty_file_rows,
    first_problem,
    numbered_quarantine_rows,
    quarantine_table,
    quoted,
    write_quarantine,
)
from schemas.bad_records import bad_fraction_limit, check_max_bad_fraction, too_many_bad
from schemas.config import DatasetJobConfig
from schemas.criteo import (
    DENSE_FEATURES,
    FIELDS,
    HEX_DIGITS,
    MAX_INT_DIGITS,
    SPARSE_FEATURES,
    layout_problems,
    registry_yaml,
)
from schemas.errors import ConfigError, DataRefusedError, RegistryError
from schemas.names import format_ds, parse_ds
from schemas.paths import local_path
from schemas.progress import Progress, silent, stderr_progress
from schemas.registry import DEFAULT_REGISTRY_DIR, DatasetRegistry, load_registry
from schemas.spark import feature_type
from warehouse.command import run_spark_job
from warehouse.confs import input_size_confs, runtime_confs
from warehouse.derived import add_derived
from warehouse.evolution import prepare_for_write
from warehouse.flags import add_common_arguments, add_engine_argument, common_settings, engine_settings
from warehouse.publish import audit_and_publish, new_run_id
from warehouse.quality import DayCounts, DayMetrics, history_before, judge, metrics_by_day, published_days
from warehouse.tables import CommitMetrics, persisted

STREAM = "criteo"
SOURCES = ("criteo",)
_INT = rf"-?[0-9]{{1,{MAX_INT_DIGITS}}}"
_HEX = rf"[0-9a-fA-F]{{{HEX_DIGITS}}}"
#: A usable line, whole: one regular expression per line is cheaper than 39 tests per field.
LINE_PATTERN = rf"^[01](\t({_INT})?){{{len(DENSE_FEATURES)}}}(\t({_HEX})?){{{len(SPARSE_FEATURES)}}}$"
_DAY_FILE = re.compile(r"day_(\d+)")


@dataclass(frozen=True, kw_only=True)
class CriteoImportConfig(DatasetJobConfig):
    ds: dt.date
    files: tuple[str, ...]
    split_days: int | None = None
    max_bad_fraction: float | None = None  # None: the registry's quality.max_bad_fraction

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.files:
            raise ConfigError("no FILE given; name the Criteo file(s) to import, e.g. train.txt or day_0.gz day_1.gz")
        if self.split_days is not None and (self.split_days < 1 or len(self.files) != 1):
            raise ConfigError(f"--split-days {self.split_days} splits one file into days: give exactly one FILE "
                              f"(got {len(self.files)}) and a positive number of days, e.g. --split-days 7 train.txt")  # fmt: skip
        check_max_bad_fraction(self.max_bad_fraction)
        for path in self.files:
            if path.endswith((".tar.gz", ".tgz", ".tar")):
                raise ConfigError(f"{path} is a tar archive (Kaggle publishes dac.tar.gz); extract the text file first, "
                                  f"e.g. tar xzf {PurePosixPath(path).name} train.txt, and import train.txt")  # fmt: skip
        numbers = [int(m.group(1)) for m in map(_DAY_FILE.search, map(_file_name, self.files)) if m]
        if len(numbers) == len(self.files) and numbers != sorted(numbers):
            raise ConfigError(
                f"the day files are not in day order ({', '.join(map(_file_name, self.files))}): FILE i becomes "
                "--ds + i days. List them in order, e.g. day_{0..23}.gz (a shell glob puts day_10 before day_2)"
            )

    def check_inputs(self) -> None:
        """The local FILEs exist (URIs are checked in the session). The registry need not: the import writes it."""
        missing = [f for f in self.files if (path := local_path(f)) is not None and not path.exists()]
        if missing:
            raise _no_such_files(missing)

    def days(self, file_index: int) -> tuple[dt.date, ...]:
        """The days file ``file_index`` holds."""
        if self.split_days is not None:
            return tuple(self.ds + dt.timedelta(days=i) for i in range(self.split_days))
        return (self.ds + dt.timedelta(days=file_index),)


@dataclass(frozen=True)
class DayResult:
    """One day of an import: its lines, what was quarantined, staged and decided."""

    ds: str
    source: str
    first_line: int
    lines: int
    bad: int
    clicks: int
    problems: Mapping[str, int]
    staging_table: str | None = None  # where a refused day's rows are kept; None: published, or refused before the gate
    gate: tuple[str, ...] = ()
    report_path: str | None = None
    commit: CommitMetrics | None = None
    refused: str | None = None  # why, when not published

    @property
    def rows(self) -> int:
        return self.lines - self.bad

    def format(self) -> str:
        head = (f"  ds={self.ds}  {self.source} lines {self.first_line:,}..{self.first_line + self.lines - 1:,}: "
                f"{self.rows:,} rows, {self.clicks:,} clicks, {self.bad:,} quarantined")  # fmt: skip
        if self.problems:
            by_count = sorted(self.problems.items(), key=lambda kv: -kv[1])
            head += " (" + ", ".join(f"{n:,} {code}" for code, n in by_count) + ")"
        if self.commit is not None:
            return head + f"\n      published as Delta version {self.commit.version}; " + "; ".join(self.gate)
        lines = [head, f"      NOT PUBLISHED: {self.refused}"]
        lines += [f"      {line}" for line in self.gate]
        if self.staging_table:
            lines.append(f"      rows kept in {self.staging_table}, report {self.report_path}")
        return "\n".join(lines)


@dataclass(frozen=True)
class CriteoImportSummary:
    dataset: str
    table: str
    run_id: str
    registry: str
    registry_written: bool
    quarantine_table: str
    days: tuple[DayResult, ...]
    elapsed_s: float

    @property
    def lines(self) -> int:
        return sum(d.lines for d in self.days)

    @property
    def refused(self) -> tuple[DayResult, ...]:
        return tuple(d for d in self.days if d.commit is None)

    @property
    def rows_per_second(self) -> float:
        return self.lines / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def format(self) -> str:
        published = [d for d in self.days if d.commit is not None]
        lines = [
            f"import criteo -> {self.table}: {len(published)} of {len(self.days)} days published"
            + (f", {len(self.refused)} NOT PUBLISHED" if self.refused else ""),
            f"  registry     {self.registry}" + (" (written by this import)" if self.registry_written else ""),
            f"  lines        {self.lines:,} read, {sum(d.rows for d in self.days):,} rows, "
            f"{sum(d.bad for d in self.days):,} quarantined -> {self.quarantine_table}",
            *(d.format() for d in self.days),
            f"  elapsed      {self.elapsed_s:.1f}s, {self.rows_per_second:,.0f} lines/s, run {self.run_id}",
        ]
        return "\n".join(lines)


# --------------------------------------------------------------------------- pure DataFrame logic


def _no_such_files(missing: Sequence[str]) -> ConfigError:
    return ConfigError(f"{', '.join(missing)}: no such file; give the path of a Criteo file (train.txt, day_N.gz)")


def _file_name(path: str) -> str:
    return PurePosixPath(path.rstrip("/")).name


def _uri(path: str) -> str:
    """A local path made absolute (Spark's executors do not share our working folder); a URI as given."""
    return path if "://" in path or path.startswith("file:") else str(Path(path).resolve())


def read_lines(spark: SparkSession, uri: str) -> DataFrame:
    """One row per line of the file: ``_raw``, ``split_start`` and ``_row_id`` (see :func:`number_lines`)."""
    return spark.read.text(uri).select(
        F.col("value").alias(RAW_COLUMN),
        F.col("_metadata.file_block_start").alias("split_start"),
        F.monotonically_increasing_id().alias(ROW_ID_COLUMN),
    )


def _fields() -> Column:
    return F.split(F.col(RAW_COLUMN), "\t", -1)


def parse(lines: DataFrame, label_column: str) -> DataFrame:
    """``lines`` with ``_valid`` and, on valid lines, the label and the 39 feature values; ``_raw`` only on bad lines."""
    valid = F.col(RAW_COLUMN).rlike(LINE_PATTERN)
    fields = _fields()
    empty_ids = F.array().cast("array<bigint>")
    columns = [F.when(valid, F.get(fields, 0).try_cast("int")).alias(label_column)]
    for i, name in enumerate(DENSE_FEATURES, start=1):
        text = F.get(fields, i)
        columns.append(F.when(valid & (text != ""), text.try_cast("bigint").cast("float")).alias(name))
    for i, name in enumerate(SPARSE_FEATURES, start=1 + len(DENSE_FEATURES)):
        text = F.get(fields, i)
        ids = F.when(text == "", empty_ids).otherwise(F.array(F.conv(text, 16, 10).try_cast("bigint")))
        columns.append(F.when(valid, ids).alias(name))
    return lines.select(
        "split_start", ROW_ID_COLUMN, valid.alias(VALID_COLUMN), F.when(~valid, F.col(RAW_COLUMN)).alias(RAW_COLUMN),
        *columns,
    )  # fmt: skip


def with_problem(bad: DataFrame) -> DataFrame:
    """Bad lines with ``_problem``: struct(code, reason) of the first thing wrong, naming the field."""
    raw, fields = F.col(RAW_COLUMN), _fields()

    def field_rule(index: int, name: str, pattern: str, code: str, what: str):
        text = F.get(fields, index)
        field_name = f"I{index}" if name.startswith("int_") else f"C{index - len(DENSE_FEATURES)}"
        return (~text.rlike(f"^({pattern})?$"), code,
                F.concat(F.lit(f"field {index + 1} ({field_name}, {name}): "), quoted(text), F.lit(f" is not {what}")))  # fmt: skip

    rules = [
        (F.trim(raw) == "", "empty_line", "empty line"),
        (F.size(fields) != FIELDS, "field_count",
         F.concat(F.size(fields).cast("string"), F.lit(f" tab-separated fields, expected {FIELDS} (label, "
                                                       f"{len(DENSE_FEATURES)} integers, {len(SPARSE_FEATURES)} categoricals)"))),
        (~F.get(fields, 0).isin("0", "1"), "bad_label",
         F.concat(F.lit("label "), quoted(F.get(fields, 0)), F.lit(" is not 0 or 1"))),
    ]  # fmt: skip
    rules += [field_rule(i, name, _INT, "not_integer", f"an integer of at most {MAX_INT_DIGITS} digits")
              for i, name in enumerate(DENSE_FEATURES, start=1)]  # fmt: skip
    rules += [field_rule(i, name, _HEX, "not_hex", f"{HEX_DIGITS} hex digits")
              for i, name in enumerate(SPARSE_FEATURES, start=1 + len(DENSE_FEATURES))]  # fmt: skip
    return bad.withColumn(PROBLEM_COLUMN, first_problem(rules, "the line does not fit the Criteo layout"))


def number_lines(spark: SparkSession, parsed: DataFrame) -> tuple[DataFrame, int]:
    """``parsed`` (one file's rows, persisted) with ``line``, 1-based in the file; and the file's line count.

    Spark numbers a task's rows consecutively and reads a split's lines in order, so a line is
    its ``_row_id`` minus its split's first, plus the lines of the splits before it (one small
    aggregate, collected).
    """
    splits = (parsed.groupBy("split_start").agg(F.min(ROW_ID_COLUMN).alias("first"), F.count(F.lit(1)).alias("lines"))
              .orderBy("split_start").collect())  # fmt: skip
    offsets, total = [], 0
    for split in splits:
        offsets.append((int(split["split_start"]), int(split["first"]), total))
        total += int(split["lines"])
    if not offsets:
        return parsed.withColumn("line", F.lit(None).cast("bigint")), 0
    table = spark.createDataFrame(offsets, "split_start bigint, _first bigint, _before bigint")
    numbered = parsed.join(F.broadcast(table), "split_start").withColumn(
        "line", F.col("_before") + F.col(ROW_ID_COLUMN) - F.col("_first") + 1
    )
    return numbered.drop("_first", "_before"), total


def split_sizes(lines: int, days: int) -> list[int]:
    """Lines per day as the DLRM reference splits Kaggle's file: ``lines // days`` each, the first ``lines % days`` one more.

    >>> split_sizes(45_840_617, 7)
    [6548660, 6548660, 6548660, 6548660, 6548659, 6548659, 6548659]
    """
    each, extra = divmod(lines, days)
    return [each + (1 if day < extra else 0) for day in range(days)]


def day_column(days: Sequence[dt.date], sizes: Sequence[int]) -> Column:
    """The ds of each line, by its number: the first ``sizes[0]`` lines are ``days[0]``, and so on."""
    expr, end = None, 0
    for day, size in zip(days, sizes, strict=True):
        end += size
        expr = F.when(F.col("line") <= end, F.lit(format_ds(day))) if expr is None else expr.when(
            F.col("line") <= end, F.lit(format_ds(day)))  # fmt: skip
    return expr


def table_rows(valid: DataFrame, registry: DatasetRegistry, file_name: str, day: dt.date) -> DataFrame:
    """Valid numbered lines of one day as rows of the feature table, in its column order."""
    frame = valid.select(
        F.concat(F.lit(f"{file_name}:"), F.col("line").cast("string")).alias("impression_id"),
        F.lit(None).cast("bigint").alias("user_id"),
        F.lit(None).cast("bigint").alias("item_id"),
        F.lit(None).cast("timestamp").alias("event_time"),
        *[F.col(label.column).cast("int").alias(label.column) for label in registry.labels],
        *[(F.col(f.name) if f.populated_on(day) else F.lit(None)).cast(feature_type(f)).alias(f.name)
          for f in registry.logged_features],
    )  # fmt: skip
    return add_derived(frame, registry, day).select(*registry.columns[:-1], F.lit(format_ds(day)).alias("ds"))


# --------------------------------------------------------------------------- the job


def ensure_registry(dataset: str, registry_dir: Path | None) -> tuple[DatasetRegistry, Path, bool]:
    """The dataset's registry: written from the Criteo layout if missing, else loaded and checked; and whether written."""
    path = Path(registry_dir or DEFAULT_REGISTRY_DIR) / f"{dataset}.yaml"
    written = not path.exists()
    if written:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(registry_yaml(dataset), encoding="utf-8")
        tmp.replace(path)
    registry = load_registry(path)
    problems = layout_problems(registry)
    if problems:
        raise RegistryError(f"{path} exists but is not a Criteo registry: {'; '.join(problems)}. Import into "
                            "another --dataset (its registry is then generated), or remove the file")  # fmt: skip
    return registry, path, written


def _refused_before_gate(config: CriteoImportConfig, registry: DatasetRegistry, lines: int, bad: int) -> str | None:
    """Why a day is not even staged (no lines, too many malformed ones), or None."""
    if lines == 0:
        return "no lines: the file is empty, or has fewer lines than --split-days"
    if too_many := too_many_bad(bad, lines, bad_fraction_limit(registry.quality, config.max_bad_fraction), what="lines"):
        return f"{too_many}; nothing was staged. Fix the file, or allow more with --max-bad-fraction"
    return None


def _counts(counts: Mapping[str, object]) -> tuple[int, int, int, int]:
    return tuple(int(counts.get(k) or 0) for k in ("lines", "bad", "clicks", "first"))  # type: ignore[return-value]


def _import_day(spark: SparkSession, config: CriteoImportConfig, registry: DatasetRegistry, table: str,
                numbered: DataFrame, counts: Mapping[str, object], *, day: dt.date, source: str, file_empty: bool,
                refused: str | None, gated: DataFrame | None, metrics: DayMetrics | None,
                published: dict[str, DayCounts], run_id: str, now: dt.datetime, progress: Progress) -> DayResult:  # fmt: skip
    """Quarantine one day's bad lines, then, unless ``refused`` before the gate, judge its rows (``gated``, with
    their ``metrics`` from the file's one pass and the history of the ``published`` days, which a published day
    joins) and publish them."""
    ds = format_ds(day)
    lines, bad, clicks, first = _counts(counts)
    in_day = numbered.where(F.col("ds") == ds)
    if bad:  # the line number is the file's, so split_start is 0 for every row
        located = with_problem(in_day.where(~F.col(VALID_COLUMN))).withColumns(
            {"source_file": F.lit(source), "split_start": F.lit(0).cast("bigint")})
        rows = numbered_quarantine_rows(located, STREAM, run_id, now)
    else:
        rows = empty_file_rows(spark, [source] if file_empty else [], STREAM, day, run_id, now)
    write_quarantine(spark, config.dataset, day, rows, empty=not bad and not file_empty)
    problems = {r["problem"]: r["count"] for r in rows.groupBy("problem").count().collect()} if bad or file_empty else {}
    result = DayResult(ds, _file_name(source), first or 1, lines, bad, clicks, problems)
    if refused:
        return replace(result, refused=refused)
    progress(f"{config.dataset} ds={ds}: {lines:,} lines ({bad:,} quarantined)")
    day_rows = gated.where(F.col("ds") == ds)
    report = judge(day_rows, registry, day, history_before(published, registry, day), metrics)
    gate = audit_and_publish(spark, registry, day_rows, table=table, day=day, run_id=run_id, home=config.home,
                             quarantined=(bad, None), judged=report, progress=progress)  # fmt: skip
    if gate.published:  # the history of the days after it, as the table now holds it
        published[ds] = metrics.day_counts(registry)
    failed = None if gate.published else (f"failed {len(gate.report.failures)} of {len(gate.report.checks)} quality "
                                           f"expectations ({table} is unchanged for this ds)")  # fmt: skip
    return replace(result, staging_table=None if gate.published else gate.staged, gate=tuple(gate.report.summary_lines()),
                   report_path=str(gate.report_path), commit=gate.commit, refused=failed)  # fmt: skip


def _gated_rows(numbered: DataFrame, registry: DatasetRegistry, source: str, days: Sequence[dt.date]) -> DataFrame:
    """The valid lines of ``days`` as table rows, the days' rows one after another (each day's own features)."""
    frames = [table_rows(numbered.where((F.col("ds") == format_ds(day)) & F.col(VALID_COLUMN)), registry,
                         _file_name(source), day) for day in days]  # fmt: skip
    return reduce(DataFrame.unionByName, frames)


def run(spark: SparkSession, config: CriteoImportConfig, *, progress: Progress | None = None) -> CriteoImportSummary:
    """Import the files day by day; see the module docstring. Raises :class:`DataRefusedError` if a day was refused."""
    started = time.monotonic()
    say = progress or silent
    run_id = new_run_id()
    uris = [_uri(f) for f in config.files]
    missing = [f for f, uri in zip(config.files, uris, strict=True) if not path_exists(spark, uri)]
    if missing:
        raise _no_such_files(missing)
    registry, registry_path, written = ensure_registry(config.dataset, config.registry_dir)
    if written:
        say(f"{config.dataset}: wrote the Criteo registry {registry_path}")
    table, changes = prepare_for_write(spark, registry)
    for change in changes:
        say(f"{config.dataset}: {change.action.value} {change.detail}")
    label = registry.labels[0].column
    now = dt.datetime.now(dt.UTC)
    results: list[DayResult] = []
    for index, uri in enumerate(uris):
        days = config.days(index)
        span = format_ds(days[0]) + (f" .. {format_ds(days[-1])}" if len(days) > 1 else "")
        # a small file's plans run interpreted and without AQE, as a small label join's (warehouse/confs.py)
        with runtime_confs(spark, input_size_confs(bytes_under(spark, [uri])), keep_set=True):
            say(f"{config.dataset}: reading {uri} -> ds {span}")
            parsed = parse(read_lines(spark, uri), label).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                numbered, total = number_lines(spark, parsed)
                sizes = split_sizes(total, len(days))
                numbered = numbered.withColumn("ds", day_column(days, sizes) if total else F.lit(format_ds(days[0])))
                counts = {r["ds"]: r.asDict() for r in numbered.groupBy("ds").agg(
                    F.count(F.lit(1)).alias("lines"), F.count_if(~F.col(VALID_COLUMN)).alias("bad"),
                    F.coalesce(F.sum(label), F.lit(0)).alias("clicks"), F.min("line").alias("first")).collect()}  # fmt: skip
                bad = sum(c["bad"] for c in counts.values())
                say(f"{config.dataset}: {total:,} lines in {_file_name(uri)}, {bad:,} malformed")
                refusals = {day: _refused_before_gate(config, registry, *_counts(counts.get(format_ds(day), {}))[:2])
                            for day in days}  # fmt: skip
                judged = [day for day in days if refusals[day] is None]
                with ExitStack() as stack:
                    gated, metrics, published = None, {}, {}
                    if judged:
                        gated = stack.enter_context(persisted(_gated_rows(numbered, registry, uri, judged)))
                        say(f"{config.dataset}: computing the quality metrics of ds {span} (one pass)")
                        metrics = metrics_by_day(gated, registry, judged)
                        first_day = judged[0] - dt.timedelta(days=registry.quality.history_days)
                        published = published_days(spark, table, registry, first_day, judged[-1])
                    for day in days:
                        result = _import_day(spark, config, registry, table, numbered, counts.get(format_ds(day), {}),
                                             day=day, source=uri, file_empty=total == 0, refused=refusals[day], gated=gated,
                                             metrics=metrics.get(format_ds(day)), published=published, run_id=run_id,
                                             now=now, progress=say)  # fmt: skip
                        results.append(result)
                        say(result.format())
            finally:
                parsed.unpersist()
    summary = CriteoImportSummary(config.dataset, table, run_id, str(registry_path), written,
                                  quarantine_table(config.dataset), tuple(results), time.monotonic() - started)  # fmt: skip
    if summary.refused:
        listed = ", ".join(d.ds for d in summary.refused)
        raise DataRefusedError(
            f"{len(summary.refused)} of {len(results)} days of the import were not published ({listed}); the others "
            f"were. The reasons are below; a day refused by the quality gate can be published on purpose with "
            f"featurehouse publish --dataset {config.dataset} --ds DS --force --reason '...'",
            details=summary.format(),
        )
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", choices=SOURCES, help="the published format of the files: criteo")
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="Criteo files, plain or .gz: one per day in day order (day_0.gz day_1.gz ...), or one "
                        "file with --split-days")  # fmt: skip
    parser.add_argument("--dataset", required=True, help="dataset to import into: featurehouse.<dataset>")
    parser.add_argument("--ds", required=True, help="the ds of the first day, YYYY-MM-DD (the logs carry no dates)")
    parser.add_argument("--split-days", type=int, default=None, metavar="K",
                        help="split the one FILE into K days by row ranges, as the DLRM reference splits Kaggle's "
                        "train.txt (--split-days 7)")  # fmt: skip
    parser.add_argument("--max-bad-fraction", type=float, default=None, metavar="F",
                        help="refuse a day if more than this share of its lines is malformed (default: the registry's "
                        "quality.max_bad_fraction, 0.01); bad lines are quarantined either way")  # fmt: skip
    add_common_arguments(parser)
    add_engine_argument(parser)


def parse_args(argv: Sequence[str] | None = None) -> CriteoImportConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse import",
        description="Import Criteo's published click logs (Kaggle's train.txt, the 1TB day_N files) into the Delta "
        "table featurehouse.<dataset>, one ds per day: malformed lines are quarantined, each day is staged, validated "
        "by the quality gate and published if it passes (exit 3 when a day is refused). Writes the dataset's "
        "registry if missing.",
    )
    add_arguments(parser)
    ns = parser.parse_args(argv)
    return CriteoImportConfig(dataset=ns.dataset, ds=parse_ds(ns.ds), files=tuple(ns.files), split_days=ns.split_days,
                              max_bad_fraction=ns.max_bad_fraction, **common_settings(ns),
                              **engine_settings(ns))  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return run_spark_job(lambda: parse_args(argv), lambda spark, config: run(spark, config, progress=stderr_progress))


if __name__ == "__main__":
    raise SystemExit(main())
