"""Streaming label join: throughput against the batch job, and freshness from Kafka, in one run.

    .venv/bin/python -m bench.streaming                                    # the defaults: a few minutes
    .venv/bin/python -m bench.streaming --impressions 20000 --runs 3       # more data per day
    .venv/bin/python -m bench.streaming --skip throughput --rate 1000 --seconds 120

Both parts use the demo's ``ads`` registry as shipped (labels click 1h and conversion 3d: the
longest window is 3 days) and logs written by ``featurehouse generate`` (``--impressions`` per
day, about 3 KB of JSON per impression, ~3.5% of them with a label). One local Spark session
(``local[2]``, ``--shuffle-partitions``, the embedded Hive/Derby metastore under ``--home``) runs
everything, started and warmed before any clock runs.

**1. Throughput, the same landing zone.** Five days are generated (so that the stream's
watermark closes day 1: its end plus 3 days, plus the 1h watermark delay; the label partitions
go on 3 days past day 5). Each contender runs ``--runs`` times after one warm-up, in an order that
rotates from round to round; the median counts:

* **(a) batch**: ``etl.label_join.run`` of day 1 (``featurehouse label-join --ds`` day 1): reads
  day 1's impressions and the label partitions its windows reach (days 1-4), gate, publish.
* **(b) stream**: ``etl.stream.job.run`` with ``Source.FILES``, ``Trigger.AVAILABLE_NOW`` over the
  same landing root, publishing in this process (``etl.stream.publish.run``, as the tests do)
  the days its watermark closed (day 1). A fresh home (checkpoint, stream tables) per run.

They do not read the same amount: the stream reads every file of the landing zone (5 days of
impressions, 8 days of labels), the batch day 1 and its label days. So the figure compared is
**records read per second** (impression + label lines), and the ratio is stream/batch of that.

**2. Freshness, continuous from Kafka.** A local broker (``etl.kafka.broker.local_broker``);
the topics are created with ``message.timestamp.type=LogAppendTime``, so a record's Kafka
timestamp is the time the broker appended it. ``etl.stream.job.run`` runs in this process with
``Source.KAFKA``, ``Trigger.CONTINUOUS`` (``--interval``), no publishing; once its query is
running, a thread sends generated days at ``--rate`` lines/s for about ``--seconds``
(``etl.kafka.produce.run``). When the producer is done and the query's offsets have reached the topics'
ends, the bench sends this process SIGINT, which stops the stream after its current micro-batch.

Freshness of a label = the time it became visible joined to its impression's features in what
readers query as staging (the view ``featurehouse_staging.ads_stream`` over the staged records:
the later of the two records' staging commits, each the modification time of the Delta log file
``_delta_log/<version>.json`` that added its Parquet file; Delta's history reports the same
commits) minus the Kafka append time of the later of the two records (almost always the label),
found by ``source_file``/``line`` (topic/partition, offset) in the topics read back with Spark's
batch Kafka reader. Impressions without a label are visible with their features as soon as their
own micro-batch commits; their figure is reported on its own line. The stream has no state store
(its progress reports no state operator); what waits for a day to close is the staged records, whose
size on disk is reported.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tabulate import tabulate

DS = dt.date(2026, 11, 1)
DATASET = "ads"
THROUGHPUT_DAYS = 5
#: The durationMs parts of a micro-batch's progress, in the order printed.
PARTS = ("triggerExecution", "latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


def say(message: str) -> None:
    print(message, flush=True)


# --------------------------------------------------------------------------- progress of every query


def progress_listener(spark):
    """A StreamingQueryListener keeping every progress event (as JSON) by query id."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Collect(StreamingQueryListener):
        def __init__(self) -> None:
            self.by_query: dict[str, list[dict]] = defaultdict(list)
            self.lock = threading.Lock()

        def onQueryStarted(self, event) -> None:  # noqa: N802 (Spark's names)
            pass

        def onQueryProgress(self, event) -> None:  # noqa: N802
            progress = json.loads(event.progress.json)
            with self.lock:
                self.by_query[progress["id"]].append(progress)

        def onQueryIdle(self, event) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event) -> None:  # noqa: N802
            pass

        def batches(self, query_id: str, *, wait_for: int = 0, timeout_s: float = 5.0) -> list[dict]:
            """The progress of each micro-batch that read or ran (idle reports left out), by batch id."""
            deadline = time.monotonic() + timeout_s
            while True:
                with self.lock:
                    seen = {p["batchId"]: p for p in self.by_query.get(query_id, []) if "addBatch" in p["durationMs"]}
                if len(seen) >= wait_for or time.monotonic() > deadline:  # events arrive asynchronously
                    return [seen[k] for k in sorted(seen)]
                time.sleep(0.1)

    listener = Collect()
    spark.streams.addListener(listener)
    return listener


#: Seconds inside ``etl.stream.writer.BatchWriter`` per batch id of the stream now running (reset per run): the
#: writer's whole call (addBatch's Python part), and each Delta append by table; the rest of the call is the
#: micro-batch's own work: persisting it, its counts and marks, and judging labels that may be late.
WRITER: dict[int, dict[str, float]] = defaultdict(dict)


def instrument_writer() -> None:
    """Time ``BatchWriter.__call__`` and its ``_append`` calls into WRITER (bench-only wrappers; no behaviour change)."""
    from etl.stream.writer import BatchWriter

    call, append = BatchWriter.__call__, BatchWriter._append

    def timed_call(self, batch, batch_id: int) -> None:
        began = time.perf_counter()
        try:
            call(self, batch, batch_id)
        finally:
            WRITER[batch_id]["writer"] = time.perf_counter() - began

    def timed_append(self, rows, table: str, batch_id: int) -> None:
        began = time.perf_counter()
        try:
            append(self, rows, table, batch_id)
        finally:
            WRITER[batch_id][table] = WRITER[batch_id].get(table, 0.0) + time.perf_counter() - began

    BatchWriter.__call__, BatchWriter._append = timed_call, timed_append


WRITER_PARTS = ("writer", "counts+judging", "records", "quarantine", "late_labels")


def writer_parts(batch_id: int, writer: dict[int, dict[str, float]]) -> dict[str, float]:
    w = dict(writer.get(batch_id, {}))
    appends = sum(v for k, v in w.items() if k != "writer")
    w["counts+judging"] = w.get("writer", 0.0) - appends
    return w


def profile_lines(batches: list[dict], writer: dict[int, dict[str, float]], indent: str = "    ") -> list[str]:
    """One line per micro-batch: input rows, the durationMs breakdown, and addBatch's writer by part (seconds)."""
    headers = ["batch", "rows in", *(p[:9] for p in PARTS), "|", *WRITER_PARTS]
    rows = []
    for b in batches:
        d, w = b["durationMs"], writer_parts(b["batchId"], writer)
        rows.append([str(b["batchId"]), f"{b['numInputRows']:,}", *(f"{d.get(p, 0) / 1000:.2f}" for p in PARTS), "|",
                     *(f"{w.get(p, 0.0):.2f}" for p in WRITER_PARTS)])  # fmt: skip
    table = tabulate(rows, headers=headers, tablefmt="plain", stralign="right", disable_numparse=True)
    return [indent + line for line in table.splitlines()]


# --------------------------------------------------------------------------- 1. throughput


@dataclass
class Timings:
    seconds: list[float] = field(default_factory=list)
    records: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    profiles: list[list[dict]] = field(default_factory=list)
    writers: list[dict[int, dict[str, float]]] = field(default_factory=list)
    publish_s: list[float] = field(default_factory=list)

    def median(self) -> float:
        return statistics.median(self.seconds)

    def rate(self) -> float:
        return statistics.median(r / s for r, s in zip(self.records, self.seconds, strict=True))


def count_lines(folders: list[Path]) -> int:
    """Non-empty lines of the .jsonl files under ``folders`` (what Spark reads as records)."""
    total = 0
    for folder in folders:
        for path in folder.rglob("*.jsonl"):
            with path.open("rb") as lines:
                total += sum(1 for line in lines if line.strip())
    return total


def timed_publisher(spark, config, spent: list[float]):
    """``etl.stream.publish.in_process_publisher`` (stream-publish in this process), timed into ``spent``."""
    from etl.stream.publish import in_process_publisher

    publish = in_process_publisher(spark, config)

    def timed(through: dt.date) -> int:
        began = time.perf_counter()
        try:
            return publish(through)
        finally:
            spent.append(time.perf_counter() - began)

    return timed


def throughput_logs(home: Path, impressions: int) -> Path:
    """:data:`THROUGHPUT_DAYS` generated days of ``impressions`` (kept under ``home``): their landing zone."""
    from etl.generate import job as generate

    data = home / f"logs_{impressions}"
    if not (data / "landing").exists():
        began = time.perf_counter()
        generate.run(generate.GenerateConfig(home=data, dataset=DATASET, days=THROUGHPUT_DAYS,
                                             impressions_per_day=impressions, start=DS))  # fmt: skip
        say(f"generated {THROUGHPUT_DAYS} days of {impressions:,} impressions in {time.perf_counter() - began:.1f}s")
    return data / "landing"


class BatchLabelJoin:
    """(a) ``etl.label_join.run`` of day 1 on the landing zone; it reads ``records`` records."""

    def __init__(self, spark, home: Path, landing: Path, records: int) -> None:
        self.spark, self.home, self.landing, self.records = spark, home, landing, records

    def __call__(self, round_: int, t: Timings) -> None:
        from etl import label_join

        config = label_join.LabelJoinConfig(dataset=DATASET, ds=DS, home=self.home / "batch", landing=str(self.landing))
        began = time.perf_counter()
        summary = label_join.run(self.spark, config)
        seconds = time.perf_counter() - began
        t.seconds.append(seconds)
        t.records.append(self.records)
        t.notes.append(f"{summary.impressions_read:,} impressions read, {summary.rows_out:,} rows, "
                       f"published {summary.published}")  # fmt: skip


class AvailableNowFileStream:
    """(b) ``etl.stream.job.run`` over the landing zone's files, available-now, publishing in this process, from a
    fresh home each round; its micro-batches' progress and the writer's parts kept for the report."""

    def __init__(self, spark, listener, home: Path, landing: Path) -> None:
        self.spark, self.listener, self.home, self.landing = spark, listener, home, landing

    def __call__(self, round_: int, t: Timings) -> None:
        from etl.stream import job as stream
        from etl.stream.tables import StreamTables

        run_home = self.home / "stream" / f"round{round_}"
        shutil.rmtree(run_home, ignore_errors=True)
        spent: list[float] = []
        config = stream.StreamConfig(dataset=DATASET, home=run_home, landing=str(self.landing))
        WRITER.clear()
        began = time.perf_counter()
        summary = stream.run(self.spark, config, publisher=timed_publisher(self.spark, config, spent))
        seconds = time.perf_counter() - began
        query_id = StreamTables(run_home, DATASET).query_id()
        t.seconds.append(seconds)
        t.records.append(summary.records)
        t.publish_s.append(sum(spent))
        t.profiles.append(self.listener.batches(query_id, wait_for=summary.batches))
        t.writers.append({k: dict(v) for k, v in WRITER.items()})
        t.notes.append(f"{summary.batches} micro-batches, {summary.records:,} records, {summary.rows_out:,} records "
                       f"staged, published {', '.join(summary.published) or 'nothing'}, publish {sum(spent):.1f}s")


def throughput(spark, listener, home: Path, impressions: int, runs: int) -> dict:
    from etl.records.landing import label_days
    from schemas.registry import load_dataset

    registry = load_dataset(DATASET)
    landing = throughput_logs(home, impressions)
    day_folders = [landing / "impressions" / f"ds={DS}"] + [
        landing / "labels" / f"ds={d}" for d in label_days(DS, registry.max_window)]  # fmt: skip
    batch_records = count_lines([f for f in day_folders if f.exists()])
    all_records = count_lines([landing])
    say(f"landing {landing}: {all_records:,} records in all; day 1 and its label days: {batch_records:,}")
    contenders = {"(a) batch label-join, day 1": BatchLabelJoin(spark, home, landing, batch_records),
                  "(b) stream, files, available-now": AvailableNowFileStream(spark, listener, home, landing)}
    timings = {name: Timings() for name in contenders}
    names = list(contenders)
    for round_ in range(runs + 1):
        order = names[round_ % len(names):] + names[: round_ % len(names)]
        for name in order:
            t = timings[name] if round_ else Timings()
            contenders[name](round_, t)
            say(f"  {'warm-up' if round_ == 0 else f'run {round_}'}: {name} {t.seconds[-1]:.1f}s ({t.notes[-1]})")
    return {"timings": timings, "impressions": impressions, "all_records": all_records, "batch_records": batch_records}


# --------------------------------------------------------------------------- 2. freshness


def create_append_time_topics(bootstrap: str, topics: list[str]) -> None:
    """The stream's topics, one partition each, stamped with the broker's append time."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, num_partitions=1, config={"message.timestamp.type": "LogAppendTime"}) for t in topics]
    for future in admin.create_topics(new, request_timeout=30).values():
        future.result()


def end_offsets(bootstrap: str, topics: list[str]) -> dict[str, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-streaming-ends"})
    try:
        return {t: consumer.get_watermark_offsets(TopicPartition(t, 0), timeout=10)[1] for t in topics}
    finally:
        consumer.close()


def processed_offsets(progress: dict) -> dict[str, int]:
    """The end offset of each topic that a micro-batch's progress reports (partition 0)."""
    done: dict[str, int] = {}
    for source in progress.get("sources", []):
        end = source.get("endOffset")
        end = json.loads(end) if isinstance(end, str) else end
        for topic, partitions in (end or {}).items():
            done[topic] = int(partitions.get("0", 0))
    return done


def commit_times(table: Path) -> dict[str, tuple[int, float]]:
    """Each Parquet file the Delta log added: (version, when its commit file appeared, epoch seconds)."""
    files: dict[str, tuple[int, float]] = {}
    for log in sorted((table / "_delta_log").glob("*.json")):
        version, visible = int(log.stem), log.stat().st_mtime
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                files[action["add"]["path"].rsplit("/", 1)[-1]] = (version, visible)
    return files


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class KafkaFreshnessRun:
    """Part 2's moving parts around ``stream.run`` on Kafka in this process: a producer thread sending generated days
    at ``rate`` lines/s, started once the query runs, and a watcher thread that SIGINTs this process (the stream's
    own stop: after its current micro-batch) once the query has reached the topics' ends, or has timed out.
    What they learn goes into ``out``: the query's id, the topics' ends, how long after the producer it caught up."""

    def __init__(self, spark, bootstrap: str, topics: list[str], data: Path, days: int, rate: float,
                 timeout_s: float, out: dict) -> None:  # fmt: skip
        from etl.kafka import produce

        self.spark, self.bootstrap, self.topics, self.out, self.produce = spark, bootstrap, topics, out, produce
        self.data, self.days, self.rate, self.timeout_s = data, days, rate, timeout_s
        self.produced: dict = {}
        self.stopper_log: list[str] = []
        self.streaming = threading.Event()  # set while stream.run runs: only then is a SIGINT the stream's to handle

    def producer(self) -> None:
        produce = self.produce
        try:
            self.produced["began"] = time.time()
            self.produced["summary"] = produce.run(produce.ProduceConfig(
                home=self.data, dataset=DATASET, start=DS, bootstrap=self.bootstrap, days=self.days, rate=self.rate))
        except BaseException as err:  # noqa: BLE001 (reported by the stopper)
            self.produced["error"] = err
        finally:
            self.produced["ended"] = time.time()

    def interrupt(self) -> None:
        if self.streaming.is_set():
            os.kill(os.getpid(), signal.SIGINT)  # the stream's handler: stop after the current micro-batch

    def stopper(self) -> None:
        try:
            self.watch()
        except Exception as err:  # noqa: BLE001 (the stream must not run on forever)
            self.stopper_log.append(f"the bench's watcher failed: {err!r}")
            self.interrupt()

    def running_query(self):
        """The stream's query once its sources are initialised; None if it never started (within 180 s)."""
        deadline = time.monotonic() + 180
        query = None
        while query is None or query.status["message"] == "Initializing sources":
            query = next(iter(self.spark.streams.active), None)
            if time.monotonic() > deadline or not self.streaming.is_set():
                return None
            time.sleep(0.2)
        return query

    def wait_caught_up(self, query, ends: dict[str, int]) -> None:
        """Until the query's offsets reach ``ends`` (or ``timeout_s`` after the producer ended, or the query stops)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            last = query.lastProgress
            done = processed_offsets(last) if last else {}
            if all(done.get(t, -1) >= end for t, end in ends.items()):
                self.out["caught_up_after_s"] = time.time() - self.produced["ended"]
                return
            if time.monotonic() > deadline or not query.isActive:
                self.stopper_log.append(f"not caught up {self.timeout_s:g}s after the producer ended: processed "
                                        f"{done}, topic ends {ends}")  # fmt: skip
                return
            time.sleep(0.5)

    def watch(self) -> None:
        """Start the producer once the query runs; SIGINT this process once it has caught up (or timed out)."""
        query = self.running_query()
        if query is None:
            self.stopper_log.append("the query never started")
            self.interrupt()
            return
        self.out["query_id"] = str(query.id)
        send = threading.Thread(target=self.producer, name="producer", daemon=True)
        send.start()
        send.join()
        if "error" in self.produced:
            self.stopper_log.append(f"the producer failed: {self.produced['error']!r}")
            self.interrupt()
            return
        ends = end_offsets(self.bootstrap, self.topics)
        self.out["ends"] = ends
        self.wait_caught_up(query, ends)
        if query.isActive:
            self.interrupt()

    @staticmethod
    def progress(message: str) -> None:
        say(f"    {message}")

    def run(self, config):
        """``stream.run`` with the watcher beside it; its summary, once the watcher is done (30 s at most)."""
        from etl.stream import job as stream

        watcher = threading.Thread(target=self.stopper, name="stopper", daemon=True)
        WRITER.clear()
        self.streaming.set()
        watcher.start()
        began = time.time()
        try:
            summary = stream.run(self.spark, config, progress=self.progress)
        finally:
            self.streaming.clear()
        self.out["stream_s"] = time.time() - began
        watcher.join(30)
        for line in self.stopper_log:
            say(f"  NOTE: {line}")
        return summary


def kafka_logs(home: Path, impressions: int, days: int) -> Path:
    """``days`` generated days of ``impressions`` (kept under ``home``), for the producer to send."""
    from etl.generate import job as generate

    data = home / f"kafka_logs_{impressions}_{days}"
    if not (data / "landing").exists():
        generate.run(generate.GenerateConfig(home=data, dataset=DATASET, days=days, impressions_per_day=impressions,
                                             start=DS))  # fmt: skip
    return data


def kafka_append_times(spark, bootstrap: str, topics: list[str]):
    """Kafka append time of every record, by (kafka:<topic>/<partition>, offset), read back with Spark (cached)."""
    from pyspark.sql import functions as F

    kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", ",".join(topics)).option("startingOffsets", "earliest")
             .option("endingOffsets", "latest").load()
             .select(F.concat(F.lit("kafka:"), "topic", F.lit("/"), F.col("partition").cast("string")).alias("k_file"),
                     F.col("offset").alias("k_offset"), (F.unix_micros("timestamp") / 1e6).alias("k_time"))
             .cache())  # fmt: skip
    kafka.count()
    return kafka


def freshness(spark, listener, home: Path, impressions: int, rate: float, seconds: float, interval: int,
              timeout_s: float) -> dict:  # fmt: skip
    from etl.kafka.broker import local_broker
    from etl.records.landing import RecordKind
    from etl.stream import job as stream
    from etl.stream.tables import StreamTables

    # enough generated days for --seconds at --rate (about 1.04 lines per impression)
    days = max(1, math.ceil(rate * seconds / (impressions * 1.04)))
    data = kafka_logs(home, impressions, days)
    run_home = home / "kafka_stream"
    shutil.rmtree(run_home, ignore_errors=True)
    tables = StreamTables(run_home, DATASET)
    out: dict = {"days": days, "interval": interval}
    with local_broker(home / "kafka") as broker:
        config = stream.StreamConfig(dataset=DATASET, home=run_home, source=stream.Source.KAFKA,
                                     trigger=stream.Trigger.CONTINUOUS, interval=dt.timedelta(seconds=interval),
                                     bootstrap=broker.bootstrap, publish=False)  # fmt: skip
        topics = [config.topic(s) for s in (RecordKind.IMPRESSIONS, RecordKind.LABELS)]
        create_append_time_topics(broker.bootstrap, topics)
        say(f"broker {broker.bootstrap}; topics {', '.join(topics)} (LogAppendTime); sending {days} days of "
            f"{impressions:,} impressions at {rate:g} lines/s")  # fmt: skip
        run = KafkaFreshnessRun(spark, broker.bootstrap, topics, data, days, rate, timeout_s, out)
        summary = run.run(config)
        if "summary" not in run.produced:
            raise RuntimeError(f"the producer did not finish: {run.produced.get('error')!r}")
        sent = run.produced["summary"]
        out["sent"] = sent.lines
        out["send_s"] = sent.elapsed_s
        out["summary"] = summary
        out["profile"] = listener.batches(out.get("query_id", ""), wait_for=summary.batches)
        out["writer"] = {k: dict(v) for k, v in WRITER.items()}
        return _freshness_figures(spark, tables, kafka_append_times(spark, broker.bootstrap, topics), out)


def _freshness_figures(spark, tables, kafka, out: dict) -> dict:
    """Freshness of each staged label joined to its impression, from the records table, the view and the topics."""
    from pyspark.sql import functions as F

    from schemas.registry import load_dataset

    files = commit_times(Path(tables.path("records")))
    visible = spark.createDataFrame([(name, version, at) for name, (version, at) in files.items()],
                                    "file string, version long, visible double")  # fmt: skip
    history = {r.version: r.timestamp for r in spark.sql(f"DESCRIBE HISTORY delta.`{tables.path('records')}`")
               .select("version", "timestamp").collect()}  # fmt: skip
    out["history_vs_mtime_s"] = max((abs(history[v].replace(tzinfo=dt.UTC).timestamp() - at)
                                     for v, at in files.values() if v in history), default=float("nan"))  # fmt: skip
    # when each staged record became visible: the commit that added its Parquet file
    records = (tables.read(spark, "records")
               .select(F.element_at(F.split("_metadata.file_path", "/"), -1).alias("file"), "source_file", "line")
               .join(visible, "file", "left").drop("file"))  # fmt: skip
    appended = kafka.select(F.col("k_file").alias("source_file"), F.col("k_offset").alias("line"), "k_time")
    records = records.join(appended, ["source_file", "line"], "left")
    imp = records.select("source_file", "line", F.col("visible").alias("i_visible"), F.col("k_time").alias("i_append"))
    lab = records.select(F.col("source_file").alias("label_file"), F.col("line").alias("label_line"),
                         F.col("visible").alias("l_visible"), F.col("k_time").alias("l_append"))  # fmt: skip
    view = tables.staged(spark, load_dataset(DATASET, None))
    rows = (view.select("source_file", "line", "label_file", "label_line")
            .join(imp, ["source_file", "line"], "left").join(lab, ["label_file", "label_line"], "left")
            .select(F.col("label_file").isNotNull().alias("matched"), "i_visible", "i_append", "l_visible", "l_append")
            .collect())  # fmt: skip
    resolved = [r for r in rows if r.i_visible is not None and r.i_append is not None
                and (not r.matched or (r.l_visible is not None and r.l_append is not None))]  # fmt: skip
    matched = [max(r.i_visible, r.l_visible) - max(r.i_append, r.l_append) for r in resolved if r.matched]
    unmatched = [r.i_visible - r.i_append for r in resolved if not r.matched]
    out["label_last"] = sum(1 for r in resolved if r.matched and r.l_append >= r.i_append)
    out["matched"], out["unmatched"] = matched, unmatched
    out["unresolved"] = len(rows) - len(resolved)
    out["commits"] = len({v for v, _ in files.values()})
    out["records_bytes"] = sum(f.stat().st_size for f in Path(tables.path("records")).rglob("*.parquet"))
    states = (tables.read(spark, "progress").orderBy("batch_id")
              .select("batch_id", "state_rows", "state_memory_bytes", "input_rows", "output_rows").collect())  # fmt: skip
    out["state"] = states
    kafka.unpersist()
    return out


# --------------------------------------------------------------------------- the report


def report(tp: dict | None, fr: dict | None, ns: argparse.Namespace) -> None:
    say("")
    say("=" * 100)
    say("command: " + shlex.join(sys.orig_argv))
    say(f"session: local[2], spark.sql.shuffle.partitions={ns.shuffle_partitions}, registry {DATASET} "
        "(longest window 3d), watermark delay 1h")  # fmt: skip
    if tp is not None:
        report_throughput(tp)
    if fr is not None:
        report_freshness(fr, ns)
    say("=" * 100)


def report_throughput(tp: dict) -> None:
    """Part 1's figures: each contender's records/s, the ratio, the stream's micro-batches of its median run."""
    t = tp["timings"]
    a, b = t["(a) batch label-join, day 1"], t["(b) stream, files, available-now"]
    say(f"\n1. throughput: {THROUGHPUT_DAYS} generated days of {tp['impressions']:,} impressions, "
        f"{len(a.seconds)} runs each after a warm-up (median [min..max])")  # fmt: skip
    rows = [(name, f"{statistics.median(x.records):,.0f}", f"{x.median():6.1f} [{min(x.seconds):5.1f}..{max(x.seconds):5.1f}]",
             f"{x.rate():,.0f}") for name, x in t.items()]  # fmt: skip
    say(tabulate(rows, headers=("", "records read", "seconds", "records/s"), tablefmt="plain",
                 colalign=("left", "right", "right", "right"), disable_numparse=True))  # fmt: skip
    say(f"stream/batch records/s: {b.rate() / a.rate():.2f}x   (stream/batch seconds: "
        f"{b.median() / a.median():.2f}x for {statistics.median(b.records) / statistics.median(a.records):.1f}x "
        "the records)")  # fmt: skip
    say(f"  (a) reads day 1's impressions + its label days (1-4); (b) every file of the landing zone; "
        f"(b)'s time includes its in-process publish of day 1: median {statistics.median(b.publish_s):.1f}s")
    median_run = sorted(range(len(b.seconds)), key=lambda i: b.seconds[i])[len(b.seconds) // 2]
    say("  (b) micro-batches of its median run: durationMs (s) | addBatch's writer by part (s); rows in = files")
    for line in profile_lines(b.profiles[median_run], b.writers[median_run]):
        say(line)


def report_freshness(fr: dict, ns: argparse.Namespace) -> None:
    """Part 2's figures: rate, freshness of labels, impressions alone apart, state, micro-batches."""
    s = fr["summary"]
    m, u = fr["matched"], fr["unmatched"]
    say(f"\n2. freshness: Kafka, continuous, interval {fr['interval']}s, {fr['days']} generated days of "
        f"{ns.impressions:,} impressions sent at --rate {ns.rate:g}")  # fmt: skip
    say(f"  rate achieved            {fr['sent'] / fr['send_s']:,.0f} lines/s ({fr['sent']:,} lines in "
        f"{fr['send_s']:.1f}s)")  # fmt: skip
    say(f"  stream                   {s.batches} micro-batches, {s.records:,} records in, {s.rows_out:,} records "
        f"staged in {fr['commits']} commits; caught up {fr.get('caught_up_after_s', float('nan')):.1f}s after "
        f"the producer ended; stopped by {s.stopped_by}")  # fmt: skip
    say(f"  freshness, labels        median {statistics.median(m) if m else float('nan'):.1f}s, "
        f"p95 {percentile(m, 0.95):.1f}s, max {max(m, default=float('nan')):.1f}s over {len(m):,} labels joined "
        f"to their impression in the staging view (label appended last in {fr['label_last']:,})")  # fmt: skip
    say(f"  impressions alone        {len(u):,} rows with no label: visible with their features "
        f"median {statistics.median(u) if u else float('nan'):.1f}s after the impression's append")  # fmt: skip
    if fr["unresolved"]:
        say(f"  NOTE: {fr['unresolved']:,} staged rows had no commit time or Kafka record")
    say(f"  (visible = the records commit's _delta_log file mtime; DESCRIBE HISTORY differs from it by at "
        f"most {fr['history_vs_mtime_s']:.3f}s)")
    st = fr["state"]
    if st:
        rows_max = max(r.state_rows for r in st)
        mem_max = max(r.state_memory_bytes for r in st)
        say(f"  Spark state              max {rows_max:,} rows / {mem_max / 2**20:.1f} MiB (no state store); staged "
            f"records on disk {fr['records_bytes'] / 2**20:.1f} MiB")  # fmt: skip
    batches = fr["profile"]
    with_data = [b for b in batches if b["numInputRows"] > 0]
    scanned = sum(b["numInputRows"] for b in batches)
    say(f"  source rows scanned      {scanned:,} (Spark's numInputRows) for {s.records:,} records: "
        f"{scanned / max(s.records, 1):.1f} scans of each record per micro-batch")  # fmt: skip
    if with_data:
        say("  micro-batches with input, median [max] seconds: " + ", ".join(
            f"{p} {statistics.median(b['durationMs'].get(p, 0) for b in with_data) / 1000:.2f} "
            f"[{max(b['durationMs'].get(p, 0) for b in with_data) / 1000:.2f}]"
            for p in PARTS))  # fmt: skip
        parts = [writer_parts(b["batchId"], fr["writer"]) for b in with_data]
        say("  their addBatch's writer, median [max] seconds: " + ", ".join(
            f"{p} {statistics.median(w.get(p, 0.0) for w in parts):.2f} [{max(w.get(p, 0.0) for w in parts):.2f}]"
            for p in WRITER_PARTS))  # fmt: skip
    say("  every micro-batch: durationMs (s) | addBatch's writer by part (s)")
    for line in profile_lines(batches, fr["writer"]):
        say(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impressions", type=int, default=2000, help="impressions per generated day (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each throughput contender, after one warm-up")
    parser.add_argument("--rate", type=float, default=300, help="Kafka lines/s the producer keeps to (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=75,
                        help="about how long the producer sends: days generated = rate * seconds / lines per day")
    parser.add_argument("--interval", type=int, default=1, help="micro-batch interval of the Kafka stream, seconds")
    parser.add_argument("--catch-up-timeout", type=float, default=180,
                        help="seconds to wait, after the producer ended, for the stream to reach the topics' ends")
    parser.add_argument("--shuffle-partitions", type=int, default=2, help="spark.sql.shuffle.partitions")
    parser.add_argument("--home", type=Path, default=None, help="a fresh folder for the run (default: a temp dir)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["throughput", "freshness"], help="parts to leave out")
    ns = parser.parse_args()

    from pyspark.sql import SparkSession

    from warehouse.confs import session_confs

    from warehouse.session import configure_builder

    home = (ns.home or Path(tempfile.mkdtemp(prefix="streaming_bench_"))).resolve()
    home.mkdir(parents=True, exist_ok=True)
    confs = session_confs(home / "spark", {
        "spark.master": "local[2]",
        "spark.app.name": "featurehouse-bench-streaming",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(ns.shuffle_partitions),
        "spark.default.parallelism": "2",
    })  # fmt: skip
    spark = configure_builder(SparkSession.builder, confs).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.range(1000).count()  # start the executors before any clock runs
        listener = progress_listener(spark)
        instrument_writer()
        tp = fr = None
        if "throughput" not in ns.skip:
            say("1. throughput")
            tp = throughput(spark, listener, home, ns.impressions, ns.runs)
        if "freshness" not in ns.skip:
            say("2. freshness")
            fr = freshness(spark, listener, home, ns.impressions, ns.rate, ns.seconds, ns.interval,
                           ns.catch_up_timeout)  # fmt: skip
        report(tp, fr, ns)
    finally:
        spark.stop()
        if ns.home is None:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
