"""Label-join cost against size: `featurehouse label-join` against a plain Spark job, DuckDB and Polars, in one run.

    .venv/bin/python -m bench.label_join --impressions 20000 40000 80000      # the full suite's sizes
    .venv/bin/python -m bench.label_join --impressions 20000 --runs 3         # a quick look

For each size, one day of logs is generated first (``featurehouse generate``: the demo's ``ads``
registry, about 3 KB of JSON per impression, 1% duplicates, labels over the next 3 days). Then,
on the same files, each contender runs ``--runs`` times in rounds whose order rotates, after one
warm-up round at the first size (it starts the JVM's JIT and the engines' caches); the median
counts, printed with min and max:

* **(a) featurehouse**: ``etl.label_join.run`` as ``featurehouse label-join`` runs it: parse,
  quarantine, dedup, label join, the quality gate (Great Expectations) and one Delta commit
  replacing the ds, with the catalog record, the summary's counts and the ds's catalog statistics.
* **(s) featurehouse --no-stats**: (a) without the catalog statistics; (a)/(s) is what they cost.
* **(b) Spark, no checks** (peer): the same join as a plain Spark job in this file: read the JSON
  with the registry's schema (``spark.read.json``), dedup with a window, join the labels inside
  their windows, one Delta write. No quarantine, no line numbers, no gate, no counts.
* **(c) DuckDB** (peer): the same join in DuckDB SQL from the same JSON files to one Parquet file
  (2 threads).
* **(d) Polars** (peer): the same join with Polars' lazy API, streamed into one Parquet file.

(c) and (d) skip the two derived features whose Spark SQL expressions they lack; on the same
files their rows and labels equal each other's (checked by hand, not in every run).

(a) and (b) share one local Spark session (``local[*]``, the embedded defaults), started and
warmed before any clock runs; (c) and (d) run in this process. **Start-up** is measured apart,
once (it does not depend on the size), in rounds of its own: a fresh Python process that starts
the engine and runs one trivial query (for (a) a Spark session with Delta and the embedded
metastore, which its first catalog call opens; for (b) the session alone; for (c) and (d) the
import and one query). "With start-up" adds start-up round i to run i at every size.

Printed: seconds and rows/s (impression records read per second), the ratios to (a) round by
round (and (s)/(b): the gate without the statistics against the plain job), (a)'s steps from its progress
lines ("validating" includes the rows' first pass, which computes and persists them), the Spark jobs (a) and (b) launched, and peak
resident memory of the process doing the work (the JVM's for (a) and (b), this process's for (c)
and (d)), reset before each run to its current size: a JVM keeps the heap it grew, so for (a)
and (b) it bounds the run's need from above, and for (c) and (d) it includes this process's own
footprint (its resident size just before the run is printed beside it).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import figure, peak_mib, ratio, reset_peak, rounds, rss_mib, say, spread

REPO = Path(__file__).resolve().parent.parent

DS = dt.date(2026, 11, 1)


# --------------------------------------------------------------------------- (b) the plain Spark job


def spark_plain(spark, registry, landing: Path, out: Path) -> int:
    """The join as a plain Spark job: read with a schema, dedup, windowed label join, one Delta write."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from etl.records.landing import label_days
    from schemas.spark import FEATURE_MAPS, feature_type, impression_record_schema, label_event_schema

    ds = DS.isoformat()
    schema = impression_record_schema(registry)
    schema.fields.pop()  # no _corrupt_record: a plain job does not keep bad lines
    impressions = spark.read.schema(schema).option("recursiveFileLookup", "true").json(
        str(landing / "impressions" / f"ds={ds}")).withColumn("_file", F.input_file_name())  # fmt: skip
    label_dirs = [str(landing / "labels" / f"ds={d}") for d in label_days(DS, registry.max_window)]
    labels = spark.read.schema(label_event_schema()).option("recursiveFileLookup", "true").json(label_dirs)
    first = Window.partitionBy("impression_id").orderBy("event_time", "_file")
    unique = impressions.withColumn("_n", F.row_number().over(first)).where("_n = 1")
    delay = F.unix_micros(F.col("l.event_time")) - F.unix_micros(F.col("i.event_time"))
    positives = unique.select("impression_id", "event_time").alias("i").join(
        labels.alias("l"), F.col("i.impression_id") == F.col("l.impression_id")
    ).groupBy(F.col("i.impression_id").alias("impression_id")).agg(*[
        F.max(F.when((F.col("l.label_type") == label.name) & (delay >= 0)
                     & (delay <= label.window // dt.timedelta(microseconds=1)), 1).otherwise(0)).alias(label.column)
        for label in registry.labels
    ])  # fmt: skip
    joined = unique.join(positives, "impression_id", "left").fillna(0, subset=list(registry.label_columns))
    logged = {f.name: F.coalesce(*[F.col(FEATURE_MAPS[f.kind]).getField(k) for k in f.log_keys]).cast(feature_type(f))
              if f.populated_on(DS) else F.lit(None).cast(feature_type(f)) for f in registry.logged_features}  # fmt: skip
    rows = joined.select("impression_id", "user_id", "item_id", "event_time", *registry.label_columns,
                         *[column.alias(name) for name, column in logged.items()])  # fmt: skip
    for f in registry.derived_features:
        rows = rows.withColumn(f.name, F.expr(f.derived).cast(feature_type(f)))
    rows.withColumn("ds", F.lit(ds)).write.format("delta").mode("overwrite").partitionBy("ds").save(str(out))
    return _RECORDS[str(landing)]  # impression records read, as (a) counts them


#: Impression records (lines) of each landing zone, counted once before the clocks run.
_RECORDS: dict[str, int] = {}


# --------------------------------------------------------------------------- (c) DuckDB


def _duck_type(kind) -> str:
    from schemas.registry import Kind

    return {Kind.DENSE: "DOUBLE", Kind.SPARSE: "BIGINT[]", Kind.WEIGHTED_SPARSE: "STRUCT(id BIGINT, weight DOUBLE)[]"}[kind]


def duckdb_join(registry, landing: Path, out: Path) -> int:
    """The same join in DuckDB SQL, from the JSON files to one Parquet file."""
    import duckdb

    from etl.records.landing import label_days
    from schemas.spark import FEATURE_MAPS

    ds = DS.isoformat()
    maps = {
        column: "STRUCT(" + ", ".join(f'"{k}" {_duck_type(kind)}' for k in sorted(
            {k for f in registry.logged_features if f.kind is kind for k in f.log_keys})) + ")"
        for kind, column in FEATURE_MAPS.items()
    }  # fmt: skip
    columns = ("{impression_id: 'VARCHAR', user_id: 'BIGINT', item_id: 'BIGINT', event_time: 'VARCHAR', "
               + ", ".join(f"{c}: '{t}'" for c, t in maps.items()) + "}")  # fmt: skip
    label_files = sorted(str(p) for d in label_days(DS, registry.max_window)
                         for p in (landing / "labels" / f"ds={d}").glob("*/*.jsonl"))  # fmt: skip
    positives = ", ".join(
        f"max(CASE WHEN l.label_type = '{label.name}' AND epoch_us(l.t) - epoch_us(i.t) BETWEEN 0 AND "
        f"{label.window // dt.timedelta(microseconds=1)} THEN 1 ELSE 0 END) AS {label.column}"
        for label in registry.labels
    )
    features = ", ".join(
        (f"CAST(coalesce({', '.join(f'i.{FEATURE_MAPS[f.kind]}.{k}' for k in f.log_keys)}) AS "
         f"{'FLOAT' if f.dtype.value == 'float32' and f.kind.value == 'dense' else _duck_type(f.kind)}) AS {f.name}")
        for f in registry.logged_features if f.populated_on(DS)
    )  # fmt: skip
    labels_sql = ", ".join(f"coalesce(p.{c}, 0) AS {c}" for c in registry.label_columns)
    con = duckdb.connect()
    con.execute("SET threads = 2; SET TimeZone = 'UTC'; SET preserve_insertion_order = false")
    con.execute(f"""
        COPY (
          WITH raw AS (
            SELECT *, CAST(event_time AS TIMESTAMPTZ) AS t FROM read_json(
              '{landing}/impressions/ds={ds}/*/*.jsonl', format = 'newline_delimited', filename = true,
              columns = {columns})),
          i AS (SELECT * FROM raw QUALIFY row_number() OVER (PARTITION BY impression_id ORDER BY t, filename) = 1),
          l AS (SELECT impression_id, label_type, CAST(event_time AS TIMESTAMPTZ) AS t FROM read_json(
              {label_files!r}, format = 'newline_delimited',
              columns = {{impression_id: 'VARCHAR', label_type: 'VARCHAR', event_time: 'VARCHAR'}})),
          p AS (SELECT i.impression_id, {positives} FROM i JOIN l ON i.impression_id = l.impression_id GROUP BY 1)
          SELECT i.impression_id, i.user_id, i.item_id, i.t AS event_time, {labels_sql}, {features}, '{ds}' AS ds
          FROM i LEFT JOIN p ON i.impression_id = p.impression_id
        ) TO '{out}' (FORMAT parquet, COMPRESSION snappy)
    """)  # fmt: skip
    con.close()
    return _RECORDS[str(landing)]


# --------------------------------------------------------------------------- (d) Polars


def polars_join(registry, landing: Path, out: Path) -> int:
    """The same join with Polars' lazy API (its streaming engine), from the JSON files to one Parquet file."""
    import polars as pl

    from etl.records.landing import label_days
    from schemas.registry import Kind
    from schemas.spark import FEATURE_MAPS

    ds = DS.isoformat()
    value = {Kind.DENSE: pl.Float64, Kind.SPARSE: pl.List(pl.Int64),
             Kind.WEIGHTED_SPARSE: pl.List(pl.Struct({"id": pl.Int64, "weight": pl.Float64}))}  # fmt: skip
    maps = {column: pl.Struct({k: value[kind] for k in sorted(
                {k for f in registry.logged_features if f.kind is kind for k in f.log_keys})})
            for kind, column in FEATURE_MAPS.items()}  # fmt: skip
    schema = {"impression_id": pl.String, "user_id": pl.Int64, "item_id": pl.Int64, "event_time": pl.String, **maps}
    utc = pl.col("event_time").str.to_datetime(time_zone="UTC", time_unit="us")
    raw = (pl.scan_ndjson(sorted(str(p) for p in (landing / "impressions" / f"ds={ds}").glob("*/*.jsonl")),
                          schema=schema, include_file_paths="filename")
           .with_columns(utc.alias("t")).with_row_index("row"))  # fmt: skip
    # dedup on the narrow columns only: the first copy by (event time, file) of each impression id
    first = raw.select("row", "impression_id", "t", "filename").sort("t", "filename").unique(
        "impression_id", keep="first").select("row")
    impressions = raw.join(first, on="row", how="semi")
    label_files = sorted(str(p) for d in label_days(DS, registry.max_window)
                         for p in (landing / "labels" / f"ds={d}").glob("*/*.jsonl"))  # fmt: skip
    labels = pl.scan_ndjson(label_files, schema={"impression_id": pl.String, "label_type": pl.String,
                                                 "event_time": pl.String}).with_columns(utc.alias("lt"))  # fmt: skip
    delay = (pl.col("lt") - pl.col("t")).dt.total_microseconds()
    positives = impressions.select("impression_id", "t").join(labels, on="impression_id").group_by(
        "impression_id").agg(*[
        ((pl.col("label_type") == label.name) & delay.is_between(0, label.window // dt.timedelta(microseconds=1)))
        .any().cast(pl.Int32).alias(label.column) for label in registry.labels])  # fmt: skip

    def logged(f) -> pl.Expr:
        fields = [pl.col(FEATURE_MAPS[f.kind]).struct.field(k) for k in f.log_keys]
        kept = pl.coalesce(fields) if len(fields) > 1 else fields[0]
        return (kept.cast(pl.Float32) if f.kind is Kind.DENSE and f.dtype.value == "float32" else kept).alias(f.name)

    rows = impressions.join(positives, on="impression_id", how="left").select(
        "impression_id", "user_id", "item_id", pl.col("t").alias("event_time"),
        *[pl.col(c).fill_null(0) for c in registry.label_columns],
        *[logged(f) for f in registry.logged_features if f.populated_on(DS)], pl.lit(ds).alias("ds"))  # fmt: skip
    rows.sink_parquet(out, compression="snappy")
    return _RECORDS[str(landing)]


# --------------------------------------------------------------------------- start-up

#: What a fresh process runs to start each engine: imports, session, one trivial query.
STARTUP = {
    "a": "from warehouse.session import spark_session\n"
         "with spark_session(HOME, conf={'spark.ui.enabled': 'false'}) as spark:\n"
         "    spark.sql('SHOW DATABASES').collect()",
    "b": "from warehouse.session import spark_session\n"
         "with spark_session(HOME, conf={'spark.ui.enabled': 'false'}) as spark:\n"
         "    spark.range(1).count()",
    "c": "import duckdb\nduckdb.connect().execute('SELECT 1').fetchall()",
    "d": "import polars as pl\npl.select(pl.lit(1)).to_series().to_list()",
}


def startup(key: str, home: Path) -> dict:
    """Seconds for a fresh Python process to start contender ``key``'s engine and run one trivial query."""
    code = f"from pathlib import Path; HOME = Path({str(home.resolve())!r})\n"
    began = time.perf_counter()
    # run from the repository's root, so that the probe imports this checkout's packages (its sys.path starts there)
    done = subprocess.run([sys.executable, "-c", code + STARTUP[key]], capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - began
    if done.returncode:
        raise RuntimeError(f"start-up probe of ({key}) failed: {done.stderr.strip()[-500:]}")
    return {"seconds": seconds}


# --------------------------------------------------------------------------- the contenders, measured

NAMES = {"a": "featurehouse label-join", "s": "featurehouse label-join --no-stats", "b": "Spark, no checks",
         "c": "DuckDB", "d": "Polars"}
#: The engine each contender starts (its start-up rounds): (s) is (a) without the statistics.
ENGINE = {"s": "a"}


def _steps(say_log: list[tuple[float, str]], end: float) -> dict[str, float]:
    """Seconds per step of (a), from the time stamps of its progress lines."""
    steps: dict[str, float] = {}
    for (at, message), (next_at, _next) in zip(say_log, [*say_log[1:], (end, "")], strict=True):
        name = message.split(": ", 1)[-1].split(" ")[0] if ": " in message else message.split(" ")[0]
        steps[name] = steps.get(name, 0.0) + next_at - at
    return steps


class LabelJoinContender:
    """One contender of one size: ``run()`` does the join and returns the impression records it read.

    ``key`` is its letter in the figures; ``in_jvm`` says whose memory is measured (the JVM's for the Spark
    contenders, this process's otherwise)."""

    key = ""
    in_jvm = False

    def run(self) -> int:
        raise NotImplementedError

    def spark_jobs(self, sc, group: str) -> int | None:
        """The Spark jobs of the last run (``group``: the job group it ran in); None for the engines without Spark."""
        return None

    def steps(self, end: float) -> dict[str, float] | None:
        """Seconds per step of the last run, which ended at ``end``, where the contender reports its steps."""
        return None


class FeaturehouseLabelJoin(LabelJoinContender):
    """(a) ``etl.label_join.run`` as ``featurehouse label-join`` runs it, its progress lines time-stamped."""

    key, in_jvm = "a", True

    def __init__(self, spark, config) -> None:
        from etl import label_join

        self.spark, self.config, self.label_join = spark, config, label_join.run
        self.log: list[tuple[float, str]] = []
        self.jobs: list[int] = []

    def run(self) -> int:
        self.log.clear()
        summary = self.label_join(self.spark, self.config, progress=lambda m: self.log.append((time.perf_counter(), m)))
        self.jobs.append(summary.spark_jobs)  # the run counts its own jobs, in a job group of its own
        return summary.impressions_read

    def spark_jobs(self, sc, group: str) -> int | None:
        return self.jobs[-1]

    def steps(self, end: float) -> dict[str, float] | None:
        return _steps(self.log, end)


class PlainSparkJoin(LabelJoinContender):
    """(b) the same join as a plain Spark job (:func:`spark_plain`), into a Delta table."""

    key, in_jvm = "b", True

    def __init__(self, spark, registry, landing: Path, out: Path) -> None:
        self.spark, self.registry, self.landing, self.out = spark, registry, landing, out

    def run(self) -> int:
        return spark_plain(self.spark, self.registry, self.landing, self.out)

    def spark_jobs(self, sc, group: str) -> int | None:
        return len(sc.statusTracker().getJobIdsForGroup(group))


class DuckdbJoin(LabelJoinContender):
    """(c) the same join in DuckDB SQL (:func:`duckdb_join`), into one Parquet file."""

    key = "c"

    def __init__(self, registry, landing: Path, out: Path) -> None:
        self.registry, self.landing, self.out = registry, landing, out

    def run(self) -> int:
        return duckdb_join(self.registry, self.landing, self.out)


class PolarsJoin(LabelJoinContender):
    """(d) the same join with Polars' lazy API (:func:`polars_join`), into one Parquet file."""

    key = "d"

    def __init__(self, registry, landing: Path, out: Path) -> None:
        self.registry, self.landing, self.out = registry, landing, out

    def run(self) -> int:
        return polars_join(self.registry, self.landing, self.out)


class Measured:
    """A contender's timed run at one size, for :func:`common.rounds`: its seconds and rows, the peak resident memory
    of the process doing the work (reset before the run) and its size before, the Spark jobs, (a)'s steps."""

    def __init__(self, contender: LabelJoinContender, sc, jvm_pid: int, size: int) -> None:
        self.contender, self.sc, self.jvm_pid, self.size = contender, sc, jvm_pid, size

    def __call__(self) -> dict:
        key = self.contender.key
        pid = self.jvm_pid if self.contender.in_jvm else os.getpid()
        before = rss_mib(pid)
        reset_peak(pid)
        group = f"bench-{self.size}-{key}-{time.monotonic_ns()}"
        self.sc.setJobGroup(group, NAMES[key])
        began = time.perf_counter()
        rows = self.contender.run()
        seconds = time.perf_counter() - began
        result = {"seconds": seconds, "rows": rows, "peak_mib": peak_mib(pid), "rss_before_mib": before,
                  "spark_jobs": self.contender.spark_jobs(self.sc, group)}  # fmt: skip
        steps = self.contender.steps(began + seconds)
        if steps is not None:
            result["steps"] = steps
        return result


class EngineStartup:
    """Contender ``key``'s start-up in a fresh process (:func:`startup`), for :func:`common.rounds`."""

    def __init__(self, key: str, home: Path) -> None:
        self.key, self.home = key, home

    def __call__(self) -> dict:
        return startup(self.key, self.home)


# --------------------------------------------------------------------------- the run


def _jvm_pid(spark) -> int:
    """The process id of the session's JVM (this process's where the gateway did not start one)."""
    gateway = spark.sparkContext._gateway
    return int(gateway.proc.pid) if getattr(gateway, "proc", None) else os.getpid()


def _landing(spark, work: Path, size: int) -> Path:
    """One generated day of ``size`` impressions (kept under ``work``), its impression records counted into
    :data:`_RECORDS`: the landing zone's folder."""
    from etl.generate import job as generate
    from etl.records.landing import Landing, read_impressions

    data = work / f"logs_{size}"
    if not (data / "landing" / "impressions" / f"ds={DS}").exists():
        say(f"label join: generating one day of {size:,} impressions")
        generate.run(generate.GenerateConfig(home=data, days=1, impressions_per_day=size, start=DS))
    landing = data / "landing"
    _RECORDS[str(landing)] = read_impressions(spark, Landing(str(landing)), [DS]).count()
    return landing


def _contenders(spark, registry, work: Path, landing: Path, size: int) -> dict[str, LabelJoinContender]:
    """Every contender of one size by key, each writing its output under ``work``."""
    from etl import label_join

    config = label_join.LabelJoinConfig(dataset="ads", ds=DS, home=work / "spark", landing=str(landing))
    return {"a": FeaturehouseLabelJoin(spark, config),
            "s": FeaturehouseLabelJoin(spark, dataclasses.replace(config, stats=False)),
            "b": PlainSparkJoin(spark, registry, landing, work / f"plain_{size}"),
            "c": DuckdbJoin(registry, landing, work / f"duck_{size}.parquet"),
            "d": PolarsJoin(registry, landing, work / f"polars_{size}.parquet")}  # fmt: skip


def _size_figures(results: dict[str, list[dict]], keys: list[str], startup_too: bool) -> dict:
    """One size's figures by contender, from its rounds (and the start-up rounds, paired by round)."""
    with_start = {k: [{"seconds": r["seconds"] + s["seconds"]} for r, s in
                      zip(results[k], results[f"start-up {ENGINE.get(k, k)}"], strict=True)] for k in keys} \
        if startup_too else {}  # fmt: skip
    by = {}
    for k in keys:
        by[k] = {"seconds": figure(results[k]), "rows_per_s": figure([{"v": r["rows"] / r["seconds"]} for r in results[k]], "v"),
                 "peak_mib": figure(results[k], "peak_mib"), "rss_before_mib": figure(results[k], "rss_before_mib"),
                 "rows": results[k][0]["rows"]}  # fmt: skip
        if startup_too:
            by[k] |= {"with_startup": figure(with_start[k]), "startup": figure(results[f"start-up {ENGINE.get(k, k)}"])}
        if k in "asb":
            by[k]["spark_jobs"] = figure(results[k], "spark_jobs")
        if k == "a":
            steps = results[k][0]["steps"]
            by[k]["steps"] = {name: figure([{"v": r["steps"].get(name, 0.0)} for r in results[k]], "v")
                              for name in steps}  # fmt: skip
    if "a" in by:
        for k in keys[1:]:
            by[k]["a/this"] = ratio(results["a"], results[k])
            if startup_too:
                by[k]["a/this with start-up"] = ratio(with_start["a"], with_start[k])
    if "s" in by and "b" in by:  # the fixed-cost issue's targets are of (s) over (b): the gate without the statistics
        by["b"]["s/this"] = ratio(results["s"], results["b"])
        if startup_too:
            by["b"]["s/this with start-up"] = ratio(with_start["s"], with_start["b"])
    return by


def section(work: Path, *, sizes: tuple[int, ...] = (20_000, 40_000, 80_000), runs: int = 3,
            skip: tuple[str, ...] = (), startup_too: bool = True) -> dict:  # fmt: skip
    """Every contender at every size (see the module's doc); the figures as one dict.

    ``startup_too=False`` leaves the start-up rounds out (``featurehouse bench --quick``: a Spark start costs
    20-40 s here, and 4 rounds of 2 of them are most of a quick run's budget)."""
    from schemas.registry import load_dataset
    from warehouse.session import spark_session

    registry = load_dataset("ads")
    keys = [k for k in NAMES if k not in skip]
    out: dict = {"sizes": list(sizes), "contenders": {k: NAMES[k] for k in keys}, "by_size": {}}
    with spark_session(work / "spark", conf={"spark.ui.enabled": "false"}) as spark:
        sc = spark.sparkContext
        jvm_pid = _jvm_pid(spark)
        spark.range(1000).count()  # the executors start before any clock runs
        started: dict[str, list[dict]] = {}
        if startup_too:
            say("label join: start-up of each engine in a fresh process (once: it does not depend on the size)")
            started = rounds({f"start-up {k}": EngineStartup(k, work / "probe") for k in keys if k not in ENGINE}, runs,
                             label="label join: ")  # fmt: skip
        for index, size in enumerate(sizes):
            landing = _landing(spark, work, size)
            contenders = _contenders(spark, registry, work, landing, size)
            # one warm-up round for the section, at its first size: the later sizes' files were just written
            results = rounds({k: Measured(contenders[k], sc, jvm_pid, size) for k in keys}, runs,
                             label=f"label join {size:,}: ", warmup=index == 0)  # fmt: skip
            results |= started  # the start-up rounds do not depend on the size: measured once, paired by round
            by = _size_figures(results, keys, startup_too)
            out["by_size"][str(size)] = by
            say("label join: " + report_size(size, by).splitlines()[1])
    return out


def report_size(size: int, by: dict) -> str:
    lines = [f"{size:,} impressions (median [min..max] of each figure):"]
    for k, f in by.items():
        rel = f" (a)/({k}) {f['a/this']['median']:.2f}x" if "a/this" in f else ""
        if "a/this with start-up" in f:
            rel += f", with start-up {f['a/this with start-up']['median']:.2f}x"
        if "s/this" in f:
            rel += f"; (s)/({k}) {f['s/this']['median']:.2f}x"
            if "s/this with start-up" in f:
                rel += f", with start-up {f['s/this with start-up']['median']:.2f}x"
        start = f", with start-up {f['with_startup']['median']:.1f}s" if "with_startup" in f else ""
        before = f" ({f['rss_before_mib']['median']:,.0f} before the run)" if "rss_before_mib" in f else ""
        jobs = f", {f['spark_jobs']['median']:.0f} Spark jobs" if f.get("spark_jobs", {}).get("median") else ""
        lines.append(f"  ({k}) {NAMES[k]:<34} {spread(f['seconds'], 's', 1)}{start}, {f['rows_per_s']['median']:,.0f} "
                     f"rows/s, peak {f['peak_mib']['median']:,.0f} MiB{before}{jobs}{rel}")  # fmt: skip
    if "a" in by and "steps" in by["a"]:
        lines.append("  (a) by step (median s): " + ", ".join(f"{n} {v['median']:.1f}" for n, v in by["a"]["steps"].items()))
    return "\n".join(lines)


def report(out: dict) -> str:
    return "\n".join(report_size(int(size), by) for size, by in out["by_size"].items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impressions", type=int, nargs="+", default=[20_000, 40_000, 80_000], help="day sizes")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each contender, after one warm-up")
    parser.add_argument("--home", type=Path, default=None, help="a folder for the run (default: a temp dir)")
    parser.add_argument("--skip", nargs="*", default=[], choices=list(NAMES), help="contenders to leave out")
    ns = parser.parse_args(argv)
    home = ns.home or Path(tempfile.mkdtemp(prefix="label_join_bench_"))
    home.mkdir(parents=True, exist_ok=True)
    print(report(section(home, sizes=tuple(ns.impressions), runs=ns.runs, skip=tuple(ns.skip))))
    if ns.home is None:
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
