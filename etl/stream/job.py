"""Streaming label join: impressions and labels joined as they arrive, from the landing folders or Kafka.

    featurehouse stream --dataset ads --source files --trigger available-now
    featurehouse stream --dataset ads --source kafka --bootstrap 127.0.0.1:9092 --trigger continuous --interval 30s
    .venv/bin/spark-submit $(featurehouse spark-args) etl/stream/job.py --dataset ads --source files --trigger available-now

The plan is :mod:`etl.stream.plan` (the batch job's parse, flatten and quarantine over both
sources as one stream of records, no join); each micro-batch is staged by
:class:`etl.stream.writer.BatchWriter`, exactly once (Delta ``txnAppId``/``txnVersion``, checkpoint
under ``<home>/streams/<dataset>``), and judged by the stream's own watermark (:mod:`etl.stream.marks`).

Where it runs: on the embedded default (``--engine auto``) the stream is a client of the home's
engine, started if none runs. Its query belongs to the engine, and its micro-batches
(``foreachBatch``) run in the engine's Python worker, so what the driver loop here learns of a batch
it reads from the stream's batches table (:mod:`etl.stream.batches`). If this process dies, the
engine closes its session and stops the query; the same command resumes from the checkpoint.
``--engine off``, spark-submit and clusters give the stream a session of its own, which never opens
the metastore (no Hive catalog; every table is addressed by path), so other commands and the engine
run beside it.

Where rows become visible:

* an impression (with its features) and a label are in ``featurehouse_staging.<dataset>_stream_records``
  as soon as their micro-batch commits; the view ``featurehouse_staging.<dataset>_stream`` joins them;
* a ds is in ``featurehouse.<dataset>`` once it is closed (the watermark has passed its end plus the
  longest window, and the impressions its end) and passed the quality gate: after that micro-batch
  (or at start, for a day closed before a restart), the stream runs ``featurehouse stream-publish``
  (:mod:`etl.stream.publish`): on the engine in its own session (the engine holds the metastore; no
  JVM or process of its own); with a session of its own, as a process of its own that opens the
  metastore for as long as it publishes: a client of the home's engine on the embedded default
  (started if none runs; ``--engine off`` is passed on), given the stream's runtime ``--conf``
  settings, not its static ones (the engine's hold there).

``available-now`` reads what has arrived and stops (what a scheduler runs); ``continuous`` runs
micro-batches every ``--interval`` until Ctrl-C or SIGTERM, which stop it after the current
micro-batch.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from tenacity import Retrying, retry_if_exception, retry_if_result, stop_after_attempt, wait_exponential, wait_fixed

from etl.kafka.topics import DEFAULT_TOPIC_PREFIX, check_topic_prefix, topic_name
from etl.records.landing import RecordKind, path_exists
from etl.records.quarantine import SCHEMA as QUARANTINE_SCHEMA
from etl.stream import batches
from etl.stream.marks import History, claim
from etl.stream.plan import KIND, plan, read_files, read_kafka, record_columns
from etl.stream.tables import (
    DAYS_SCHEMA,
    LATE_LABELS_SCHEMA,
    PROGRESS_SCHEMA,
    StreamTables,
)
from etl.stream.publish import in_process_publisher
from etl.stream.writer import BatchWriter
from schemas.paths import landing_location
from schemas.bad_records import check_max_bad_fraction
from schemas.config import POSITIVE_INT, DatasetJobConfig, satisfies
from schemas.errors import (
    EXIT_REFUSED,
    ConfigError,
    FeaturehouseError,
    LandingError,
)
from schemas.names import format_ds
from schemas.progress import Progress, silent, stderr_progress
from schemas.redact import redact
from schemas.registry import DatasetRegistry, load_dataset, parse_duration
from warehouse.command import run_spark_job
from warehouse.confs import runtime_confs
from warehouse.flags import add_common_arguments, add_engine_argument, common_settings, engine_settings
from warehouse.publish import new_run_id
from warehouse.session import embedded_default, is_connect, uses_engine


class Source(StrEnum):
    FILES = "files"
    KAFKA = "kafka"


class Trigger(StrEnum):
    AVAILABLE_NOW = "available-now"
    CONTINUOUS = "continuous"


#: Session settings of the stream on top of the embedded ones: no Hive catalog (tables by path).
STREAM_CONFS = {"spark.sql.catalogImplementation": "in-memory"}
#: Set while the stream runs. Catalyst's constraint propagation grows without bound on the stream's plan
#: (a hundred feature columns, each judged, under a join and a union) and exhausts the driver's heap before
#: the first micro-batch; it only infers extra filters, so turning it off changes no result.
STREAM_SQL_CONFS = {"spark.sql.constraintPropagation.enabled": "false"}


@dataclass(frozen=True, kw_only=True)
class StreamConfig(DatasetJobConfig):
    source: Source = Source.FILES
    trigger: Trigger = Trigger.AVAILABLE_NOW
    interval: dt.timedelta = dt.timedelta(seconds=30)
    landing: str | None = None
    bootstrap: str | None = None
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    watermark_delay: dt.timedelta = dt.timedelta(hours=1)
    max_files: int | None = None
    max_offsets: int | None = None
    publish: bool = True
    max_bad_fraction: float | None = None  # None: the registry's quality.max_bad_fraction

    def __post_init__(self) -> None:
        super().__post_init__()
        check_topic_prefix(self.topic_prefix)
        check_max_bad_fraction(self.max_bad_fraction)
        if self.source is Source.KAFKA and not self.bootstrap:
            raise ConfigError("--source kafka needs --bootstrap HOST:PORT, the broker to read from "
                              "(e.g. --bootstrap 127.0.0.1:9092)")  # fmt: skip
        if self.source is Source.FILES and self.bootstrap:
            raise ConfigError("--bootstrap is for --source kafka; the file source reads --landing")
        for flag, value in (("max-files-per-trigger", self.max_files), ("max-offsets-per-trigger", self.max_offsets)):
            if not satisfies(value, POSITIVE_INT, optional=True):
                raise ConfigError(f"--{flag} must be a positive whole number, got {value}")

    @property
    def landing_root(self) -> str:
        return self.landing or landing_location(self.home)

    def topic(self, kind: RecordKind) -> str:
        return topic_name(self.topic_prefix, self.dataset, kind.value)


@dataclass
class StreamSummary:
    dataset: str
    source: str
    trigger: str
    batches: int = 0
    records: int = 0
    rows_out: int = 0
    quarantined: int = 0
    late_impressions: int = 0
    late_labels: int = 0
    watermark: dt.datetime | None = None
    closed_through: dt.date | None = None
    published: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    stopped_by: str | None = None  # a signal's name, when one stopped a continuous stream

    @property
    def records_per_second(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def format(self) -> str:
        tables = StreamTables(Path("."), self.dataset)
        how = f"stopped by {self.stopped_by} after the current micro-batch" if self.stopped_by else "caught up"
        return "\n".join([
            f"stream {self.dataset} ({self.source}, {self.trigger}): {how}",
            f"  micro-batches      {self.batches:,}",
            f"  records in         {self.records:,} ({self.records_per_second:,.0f}/s over {self.elapsed_s:.1f}s)",
            f"  records staged     {self.rows_out:,} -> {tables.name('records')} (joined: {tables.name('staging')})",
            f"  quarantined        {self.quarantined:,} -> {tables.name('quarantine')}"
            + (f" ({self.late_impressions:,} late impressions)" if self.late_impressions else ""),
            f"  late labels        {self.late_labels:,} -> {tables.name('late_labels')}",
            f"  watermark          {self.watermark.isoformat() if self.watermark else 'none yet'}; days closed "
            f"through {format_ds(self.closed_through) if self.closed_through else 'none yet'}",
            f"  published days     {', '.join(self.published) or self._none_published()}"
            + (f"; REFUSED {', '.join(self.refused)}" if self.refused else ""),
        ])  # fmt: skip

    def _none_published(self) -> str:
        if self.closed_through is None:
            return "none (no day has closed yet)"
        return f"none new (every closed day through {format_ds(self.closed_through)} was decided before)"


def _sources(spark: SparkSession, config: StreamConfig) -> tuple[DataFrame, DataFrame]:
    if config.source is Source.KAFKA:
        return tuple(read_kafka(spark, config.bootstrap, config.topic(s), max_offsets=config.max_offsets)
                     for s in (RecordKind.IMPRESSIONS, RecordKind.LABELS))  # fmt: skip
    landing = config.landing_root.rstrip("/")
    for s in RecordKind:
        if not path_exists(spark, f"{landing}/{s.value}"):
            raise LandingError(f"no {s.value} folder {landing}/{s.value} to stream from; write logs there "
                               "(featurehouse generate), or point --landing at the landing zone")  # fmt: skip
    return tuple(read_files(spark, f"{landing}/{s.value}", max_files=config.max_files)
                 for s in (RecordKind.IMPRESSIONS, RecordKind.LABELS))  # fmt: skip


@contextmanager
def _stop_requests() -> Iterator[Callable[[], str | None]]:
    """SIGINT and SIGTERM set a flag instead of interrupting; yields a function returning the signal's name. Outside
    the main thread (where Python cannot handle signals: an embedding host's worker thread) the host stops it."""
    seen: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    handler = lambda signum, _frame: seen.append(signal.Signals(signum).name)  # noqa: E731
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield lambda: seen[0] if seen else None
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def publish_command(config: StreamConfig, through: dt.date) -> list[str]:
    """``featurehouse stream-publish`` for ``config``'s dataset, as a separate process."""
    args = [sys.executable, "-m", "featurehouse.cli", "stream-publish", "--dataset", config.dataset,
            "--through", format_ds(through), "--home", str(config.home)]  # fmt: skip
    if config.registry_dir is not None:
        args += ["--registry-dir", str(config.registry_dir)]
    if config.max_bad_fraction is not None:
        args += ["--max-bad-fraction", str(config.max_bad_fraction)]
    if config.engine == "off":  # the user's choice holds for the publish step too: no engine started for it
        args += ["--engine", "off"]
    # as the publish process decides (--engine auto), even where this process, under spark-submit, keeps its own session
    on_engine = config.engine != "off" and embedded_default(config.spark_conf)
    for key, value in config.spark_conf.items():
        if key in STREAM_CONFS:  # the publish process opens the metastore
            continue
        if on_engine and not runtime_setting(key):
            continue  # the engine's own static settings hold there; this one is the stream's JVM's
        args += ["--conf", f"{key}={value}"]
    return args


def runtime_setting(key: str) -> bool:
    """Whether a Spark setting can change in a running session (the stream's own session says), as on an engine."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    return active is not None and active.conf.isModifiable(key)


def run(spark: SparkSession, config: StreamConfig, *, progress: Progress | None = None,
        publisher: Callable[[dt.date], int] | None = None) -> StreamSummary:  # fmt: skip
    """Run the stream until it has caught up (available-now) or is stopped (continuous); see the module docstring.

    ``publisher(through)``: decides the closed, staged days through ``through`` and returns the exit
    status of ``featurehouse stream-publish`` (default: that command as a process of its own).
    """
    with runtime_confs(spark, STREAM_SQL_CONFS):
        return _run(spark, config, progress, publisher)


def _run(spark: SparkSession, config: StreamConfig, progress: Progress | None,
         publisher: Callable[[dt.date], int] | None) -> StreamSummary:  # fmt: skip
    say = progress or silent
    started = time.monotonic()
    registry = load_dataset(config.dataset, config.registry_dir)
    tables = StreamTables(config.home, config.dataset)
    if publisher is None and is_connect(spark):  # on an engine, which holds the metastore: publish in this session
        publisher = in_process_publisher(spark, config, progress=say, report=say)
    publisher = publisher or (lambda through: _publish_process(config, through, say))
    summary = StreamSummary(config.dataset, config.source.value, config.trigger.value)
    claim(tables.checkpoint)  # before the query starts: a checkpoint of the previous plan is refused
    impression_lines, label_lines = _sources(spark, config)
    output = plan(registry, impression_lines, label_lines)
    records_schema = output.select(F.col(KIND).alias("record"), *record_columns(registry)[1:]).schema
    tables.create(spark, "records", records_schema, partitioned=True)
    tables.create(spark, "quarantine", QUARANTINE_SCHEMA, partitioned=True)
    tables.create(spark, "late_labels", LATE_LABELS_SCHEMA)
    tables.create(spark, "progress", PROGRESS_SCHEMA)
    tables.create(spark, "days", DAYS_SCHEMA)
    batches.create(spark, tables)
    run_id = new_run_id()
    writer = BatchWriter(registry, tables, run_id, config.watermark_delay)
    writer_stream = output.writeStream.foreachBatch(writer).option("checkpointLocation", str(tables.checkpoint))
    if config.trigger is Trigger.AVAILABLE_NOW:
        writer_stream = writer_stream.trigger(availableNow=True)
    else:
        writer_stream = writer_stream.trigger(processingTime=f"{int(config.interval.total_seconds())} seconds")
    say(f"stream {config.dataset}: {config.source.value} -> {tables.name('records')} ({config.trigger.value}, "
        f"watermark delay {config.watermark_delay}, checkpoint {tables.checkpoint})")  # fmt: skip
    state = _Loop(config, registry, tables, summary, say, publisher, run_id)
    with _stop_requests() as stop_requested:
        state.resume(spark)  # days closed before a restart (a publish that was stopped) are decided first
        query = start_query(writer_stream.queryName(f"featurehouse_stream_{config.dataset}"), config.dataset, say)
        try:
            while not query.awaitTermination(1.0):
                state.after_batches(query.recentProgress, spark)
                if (signal_name := stop_requested()) is not None:
                    summary.stopped_by = signal_name
                    say(f"stream {config.dataset}: {signal_name}: stopping after the current micro-batch")
                    # the running micro-batch ends first: look every 0.2 s, for as long as it takes
                    Retrying(wait=wait_fixed(0.2), retry=retry_if_result(bool))(lambda: query.status["isTriggerActive"])
                    query.stop()
                    break
        finally:
            if query.isActive:
                query.stop()
        if query.exception() is not None:
            raise query.exception()
        state.after_batches(query.recentProgress, spark, final=summary.stopped_by is None)
    summary.elapsed_s = time.monotonic() - started
    return summary


#: On an engine, starting a query with ``foreachBatch`` starts a Python worker for it, and Spark waits a fixed 10 s
#: for that worker to import pyspark and connect back (``PythonWorkerFactory``; not a setting). On a loaded host
#: that can take longer. The query has not started then, so starting it again is safe.
WORKER_TIMEOUT = "Timed out while waiting for the Python worker to connect back"
START_ATTEMPTS = 5  # waits of 1, 2, 4, 8 s between them: a start storm on the host passes


def start_query(writer_stream: Any, dataset: str, say: Progress, *, wait: Any = wait_exponential(1, max=8)) -> Any:
    """``writer_stream.start()``, tried again (up to ``START_ATTEMPTS`` in all) when the engine's foreachBatch
    worker did not connect back in time; any other error, or the last timeout, is raised as it came."""

    def again(state: Any) -> None:
        say(f"stream {dataset}: the engine's Python worker for the micro-batches did not connect back within "
            f"Spark's 10 s (a loaded host); starting the query again ({state.attempt_number + 1}/{START_ATTEMPTS})")

    retrying = Retrying(stop=stop_after_attempt(START_ATTEMPTS), wait=wait, reraise=True,
                        retry=retry_if_exception(_worker_timed_out), before_sleep=again)  # fmt: skip
    return retrying(writer_stream.start)


def _worker_timed_out(error: BaseException) -> bool:
    """Whether ``error`` is Spark's foreachBatch worker timeout, in its message or its server stack trace."""
    stack = getattr(error, "getStackTrace", lambda: None)()
    return WORKER_TIMEOUT in str(error) or WORKER_TIMEOUT in (stack or "")


@dataclass
class _Loop:
    """What the driver does between micro-batches: progress lines and rows, and publishing closed days."""

    config: StreamConfig
    registry: DatasetRegistry
    tables: StreamTables
    summary: StreamSummary
    progress: Progress
    publisher: Callable[[dt.date], int]
    run_id: str
    last_batch: int = -1
    published_through: dt.date | None = None
    history: History = field(default_factory=History)  # the marks of the batches so far (the batches table)

    def resume(self, spark: SparkSession) -> None:
        """Before the first micro-batch: the watermark and closed days the last batch left; days closed then and not
        decided yet (a publish stopped by a crash) are published now."""
        self.history = batches.history(spark, self.tables)
        last = self.history.last_batch()
        self.last_batch = -1 if last is None else last  # this run's batches come after it
        self._close(spark, last)

    def after_batches(self, progresses: Sequence[dict], spark: SparkSession, *, final: bool = False) -> None:
        """Account the batches that ran since the last call: their rows of the batches table with Spark's progress."""
        ran = {int(p["batchId"]): p for p in progresses
               if p["batchId"] > self.last_batch and "addBatch" in (p.get("durationMs") or {})}  # fmt: skip
        new = [(ran[r.batch_id], r) for r in batches.read_batches(spark, self.tables, after=self.last_batch)
               if r.batch_id in ran] if ran else []  # fmt: skip
        for _, r in new:
            self.history = self.history.with_batch(r.batch_id, r.marks)
        rows = [self._account(p, r) for p, r in new]
        if rows:
            self.tables.append(spark.createDataFrame(rows, PROGRESS_SCHEMA), "progress")
        if new or final:
            self._close(spark, self.last_batch)

    def _close(self, spark: SparkSession, batch_id: int | None) -> None:
        """The marks through micro-batch ``batch_id`` (what the next batch judges its records by): the watermark,
        and the closed days, of which those staged and not decided yet are published."""
        marks = self.history.through(batch_id)
        self.summary.watermark = marks.watermark(self.config.watermark_delay)
        through = marks.closed_through(self.registry, self.config.watermark_delay)
        if through is None:
            return
        self.summary.closed_through = through
        due = self.published_through is None or through > self.published_through
        if self.config.publish and due:
            if self.tables.waiting_days(spark, through):
                self._publish(through)
            else:
                self.published_through = through  # nothing staged is waiting: no process to start

    def _account(self, progress: dict, row: batches.BatchRow) -> dict:
        batch_id, counts = row.batch_id, row.counts
        self.last_batch = batch_id
        state = progress.get("stateOperators") or []  # none since the records plan: reported as Spark gives it
        state_rows = sum(int(s.get("numRowsTotal", 0)) for s in state)
        memory = sum(int(s.get("memoryUsedBytes", 0)) for s in state)
        s = self.summary
        s.batches += 1
        s.records += counts.input_records
        s.rows_out += counts.staged
        s.quarantined += counts.quarantined
        s.late_impressions += counts.late_impressions
        s.late_labels += counts.late_labels
        watermark = counts.watermark
        duration = int(progress.get("durationMs", {}).get("triggerExecution", 0))
        self.progress(f"stream {self.config.dataset} batch {batch_id}: {counts.input_records:,} records in, "
                      f"{counts.staged:,} staged, {counts.quarantined:,} quarantined, {counts.late_impressions:,} late "
                      f"impressions, {counts.late_labels:,} late labels, watermark "
                      f"{watermark.isoformat() if watermark else '-'}, {duration / 1000:.1f}s")  # fmt: skip
        return {"dataset": self.config.dataset, "source": self.config.source.value, "run_id": self.run_id,
                "batch_id": batch_id, "batch_time": _parse_time(progress.get("timestamp")),
                "input_rows": counts.input_records, "output_rows": counts.staged,
                "quarantined": counts.quarantined, "late_labels": counts.late_labels,
                "late_rows_dropped": counts.late_impressions + counts.late_labels,
                "watermark": watermark, "state_rows": state_rows, "state_memory_bytes": memory,
                "duration_ms": duration, "published": None}  # fmt: skip

    def _publish(self, through: dt.date) -> None:
        self.progress(f"stream {self.config.dataset}: days through {format_ds(through)} are closed; publishing them")
        status = self.publisher(through)
        if status == 0:
            self.published_through = through
            self.summary.published.append(f"through {format_ds(through)}")
        elif status == EXIT_REFUSED:
            self.published_through = through  # decided: refused days wait for `featurehouse publish`
            self.summary.refused.append(f"through {format_ds(through)}")
        else:
            message = (f"publishing the closed days through {format_ds(through)} failed (exit {status}); "
                       "the rows stay staged")  # fmt: skip
            if self.config.trigger is Trigger.AVAILABLE_NOW:
                raise FeaturehouseError(f"stream {self.config.dataset}: {message}; run `featurehouse stream-publish "
                                        f"--dataset {self.config.dataset} --through {format_ds(through)}` once the "
                                        "metastore is free, or run the stream again")  # fmt: skip
            self.progress(f"stream {self.config.dataset}: {message}; retried after the next micro-batch")


def _parse_time(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _publish_process(config: StreamConfig, through: dt.date, progress: Progress) -> int:
    """Run ``featurehouse stream-publish`` as a process of its own; its output goes to this one's stderr."""
    command = publish_command(config, through)
    progress("running " + redact(" ".join(command[1:])))
    # Under spark-submit this process talks to its JVM through PYSPARK_GATEWAY_*: the child starts its own.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYSPARK_GATEWAY_")}
    return subprocess.run(command, stdout=sys.stderr, env=env, check=False).returncode


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", required=True, help="dataset name; its registry is <registry-dir>/<dataset>.yaml")
    parser.add_argument("--source", choices=[s.value for s in Source], default=Source.FILES.value,
                        help="files: new files of the landing folders; kafka: the topics <prefix>.<dataset>.impressions "
                        "and .labels (default: %(default)s)")  # fmt: skip
    parser.add_argument("--trigger", choices=[t.value for t in Trigger], default=Trigger.AVAILABLE_NOW.value,
                        help="available-now: read what has arrived, publish what closed, stop; continuous: a "
                        "micro-batch every --interval until Ctrl-C or SIGTERM (default: %(default)s)")  # fmt: skip
    parser.add_argument("--interval", default="30s", help="micro-batch interval of --trigger continuous, e.g. 10s, 1m")
    parser.add_argument("--landing", default=None, help="landing zone root for --source files (default: <home>/landing)")
    parser.add_argument("--bootstrap", default=None, help="Kafka bootstrap servers HOST:PORT for --source kafka")
    parser.add_argument("--topic-prefix", default=DEFAULT_TOPIC_PREFIX, help="Kafka topic prefix (default: %(default)s)")
    parser.add_argument("--watermark-delay", default="1h",
                        help="how far the watermark stays behind the newest event time of either source; a ds closes "
                        "once the watermark has passed its end plus the longest label window (and the impressions its "
                        "end); records of a closed ds are kept as late (default: %(default)s)")  # fmt: skip
    parser.add_argument("--max-files-per-trigger", type=int, default=None, metavar="N",
                        help="files of each landing stream per micro-batch (default: all new files)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None, metavar="N",
                        help="Kafka records of each topic per micro-batch (default: all new records)")
    parser.add_argument("--no-publish", action="store_true",
                        help="only stage: do not run stream-publish when days close")
    parser.add_argument("--max-bad-fraction", type=float, default=None, metavar="SHARE",
                        help="refuse a closed ds if more than this share of its impression or label records is "
                        "malformed (default: the registry's quality.max_bad_fraction, 0.01 unless set); bad records "
                        "are quarantined either way")  # fmt: skip
    add_common_arguments(parser)
    add_engine_argument(parser)


def _duration(flag: str, text: str) -> dt.timedelta:
    try:
        return parse_duration(text)
    except ValueError as err:
        raise ConfigError(f"--{flag} {text!r} is not a duration; write it like 30s, 15m, 1h or 1d") from err


def parse_args(argv: Sequence[str] | None = None) -> StreamConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse stream",
        description="Stage impressions (with their features) and labels as they arrive (landing folders or Kafka) "
        "into featurehouse_staging.<dataset>_stream_records, exactly once, joined in the view "
        "featurehouse_staging.<dataset>_stream; each day that closes under the stream's watermark is validated and "
        "published into featurehouse.<dataset> by the batch job's quality gate.",
    )
    add_arguments(parser)
    ns = parser.parse_args(argv)
    return StreamConfig(
        dataset=ns.dataset,
        source=Source(ns.source),
        trigger=Trigger(ns.trigger),
        interval=_duration("interval", ns.interval),
        landing=ns.landing,
        bootstrap=ns.bootstrap,
        topic_prefix=ns.topic_prefix,
        watermark_delay=_duration("watermark-delay", ns.watermark_delay),
        max_files=ns.max_files_per_trigger,
        max_offsets=ns.max_offsets_per_trigger,
        publish=not ns.no_publish,
        max_bad_fraction=ns.max_bad_fraction,
        **common_settings(ns),
        **engine_settings(ns),
    )


def main(argv: Sequence[str] | None = None) -> int:
    def parse() -> StreamConfig:
        config = parse_args(argv)
        if uses_engine(config.engine, config.engine_url, config.spark_conf):
            return config  # the engine's session, with its Hive catalog (a static setting, fixed when it started)
        return StreamConfig(**{**config.__dict__, "spark_conf": {**STREAM_CONFS, **config.spark_conf}})

    return run_spark_job(parse, lambda spark, config: run(spark, config, progress=stderr_progress))


if __name__ == "__main__":
    raise SystemExit(main())
