"""Label-join throughput: `featurehouse label-join` against the same join without checks, in one run.

    .venv/bin/python bench/label_join.py --impressions 200000 1000000      # the issue's two sizes
    .venv/bin/python bench/label_join.py --impressions 20000 --runs 3      # a quick look

For each size, one day of logs is generated first (``featurehouse generate``: the demo's ``ads``
registry, about 3 KB of JSON per impression, 1% duplicates, labels over the next 3 days). Then,
on the same files, each contender is timed ``--runs`` times after one warm-up run, in an order
that rotates from round to round; the median counts and min and max are printed:

* **(a) featurehouse**: ``etl.label_join.run`` as ``featurehouse label-join`` runs it: parse,
  quarantine, dedup, label join, the quality gate (Great Expectations) and one Delta commit
  replacing the ds, with the catalog record and the summary's counts.
* **(b) Spark, no checks** (peer): the same join as a plain Spark job in this file: read the JSON
  with the registry's schema (``spark.read.json``), dedup with a window, join the labels inside
  their windows, one Delta write. No quarantine, no line numbers, no gate, no counts.
* **(c) DuckDB** (peer): the same join in DuckDB SQL from the same JSON files to one Parquet file
  (2 threads). It skips the two derived features whose Spark SQL expressions DuckDB lacks.

(a) and (b) share one local Spark session (``local[*]``, the embedded defaults), started and
warmed before any clock runs, so neither pays Spark's start-up; (c) runs in this process.
Printed: seconds and rows/s (impression records read per second), the ratios (a)/(b) and (b)/(c),
(a)'s steps from its progress lines, the Spark jobs each launched, and peak resident memory
(the JVM's for (a) and (b), reset before each run: a JVM keeps the heap it grew, so this bounds
the run's need from above; this process's for (c)).
"""

from __future__ import annotations

import argparse
import os
import datetime as dt
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

DS = dt.date(2026, 11, 1)


@dataclass
class Timings:
    seconds: list[float] = field(default_factory=list)
    peak_mib: list[float] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)
    steps: list[dict[str, float]] = field(default_factory=list)
    rows: int = 0

    def median(self) -> float:
        return statistics.median(self.seconds)


def reset_peak(pid: int) -> None:
    """Reset the peak resident set size (VmHWM) of ``pid`` to its current size (Linux clear_refs 5)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


def peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --------------------------------------------------------------------------- (b) the plain Spark job


def spark_plain(spark, registry, landing: Path, out: Path) -> int:
    """The join as a plain Spark job: read with a schema, dedup, windowed label join, one Delta write."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from etl.landing import label_days
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

    from etl.landing import label_days
    from schemas.spark import FEATURE_MAPS

    ds = DS.isoformat()
    maps = {
        column: "STRUCT(" + ", ".join(f'"{k}" {_duck_type(kind)}' for k in sorted(
            {k for f in registry.logged_features if f.kind is kind for k in f.log_keys})) + ")"
        for kind, column in FEATURE_MAPS.items()
    }  # fmt: skip
    columns = ("{impression_id: 'VARCHAR', user_id: 'BIGINT', item_id: 'BIGINT', event_time: 'VARCHAR', "
               + ", ".join(f"{c}: '{t}'" for c, t in maps.items()) + "}")  # fmt: skip
    label_files = [str(landing / "labels" / f"ds={d}" / "*" / "*.jsonl") for d in label_days(DS, registry.max_window)]
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


# --------------------------------------------------------------------------- the run


def _steps(say_log: list[tuple[float, str]], end: float) -> dict[str, float]:
    """Seconds per step of (a), from the time stamps of its progress lines."""
    steps: dict[str, float] = {}
    for (at, message), (next_at, _next) in zip(say_log, [*say_log[1:], (end, "")], strict=True):
        name = message.split(": ", 1)[-1].split(" ")[0] if ": " in message else message.split(" ")[0]
        steps[name] = steps.get(name, 0.0) + next_at - at
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impressions", type=int, nargs="+", default=[200_000, 1_000_000], help="day sizes to run")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each contender, after one warm-up")
    parser.add_argument("--home", type=Path, default=None, help="a fresh folder for the run (default: a temp dir)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["a", "b", "c"], help="contenders to leave out")
    ns = parser.parse_args()

    from etl import generate, label_join
    from etl.landing import Landing, read_impressions
    from schemas.registry import load_dataset
    from warehouse.session import spark_session

    home = ns.home or Path(tempfile.mkdtemp(prefix="label_join_bench_"))
    home.mkdir(parents=True, exist_ok=True)
    registry = load_dataset("ads")
    results: dict[int, dict[str, Timings]] = {}
    with spark_session(home / "spark", conf={"spark.ui.enabled": "false"}) as spark:
        sc = spark.sparkContext
        jvm_pid = int(sc._gateway.proc.pid) if getattr(sc._gateway, "proc", None) else None
        spark.range(1000).count()  # start the executors before any clock runs
        for size in ns.impressions:
            data = home / f"logs_{size}"
            if not (data / "landing" / "impressions" / f"ds={DS}").exists():
                began = time.perf_counter()
                generate.run(generate.GenerateConfig(home=data, days=1, impressions_per_day=size, start=DS))
                print(f"generated {size:,} impressions in {time.perf_counter() - began:.1f}s", flush=True)
            landing = data / "landing"
            _RECORDS[str(landing)] = read_impressions(spark, Landing(str(landing)), [DS]).count()
            log: list[tuple[float, str]] = []
            config = label_join.LabelJoinConfig(dataset="ads", ds=DS, home=home / "spark", landing=str(landing))

            jobs_of_a: list[int] = []

            def a() -> int:
                log.clear()
                summary = label_join.run(spark, config, progress=lambda m: log.append((time.perf_counter(), m)))
                jobs_of_a.append(getattr(summary, "spark_jobs", None))  # the run counts its own jobs (its own job group)
                return summary.impressions_read

            contenders: dict[str, Callable[[], int]] = {
                "(a) featurehouse label-join": a,
                "(b) Spark, no checks": lambda: spark_plain(spark, registry, landing, home / f"plain_{size}"),
                "(c) DuckDB": lambda: duckdb_join(registry, landing, home / f"duck_{size}.parquet"),
            }
            contenders = {k: v for k, v in contenders.items() if k[1] not in ns.skip}
            timings = {name: Timings() for name in contenders}
            names = list(contenders)
            for round_ in range(ns.runs + 1):
                order = names[round_ % len(names):] + names[: round_ % len(names)]
                for name in order:
                    pid = jvm_pid if name[1] in "ab" and jvm_pid else os.getpid()
                    reset_peak(pid)
                    group = f"bench-{size}-{round_}-{name[1]}"
                    sc.setJobGroup(group, name)
                    began = time.perf_counter()
                    rows = contenders[name]()
                    seconds = time.perf_counter() - began
                    jobs = len(sc.statusTracker().getJobIdsForGroup(group))
                    if name.startswith("(a)") and jobs_of_a[-1] is not None:
                        jobs = jobs_of_a[-1]
                    print(f"  {size:,} {'warm-up' if round_ == 0 else f'run {round_}'}: {name} {seconds:.1f}s", flush=True)
                    if round_ == 0:
                        continue
                    t = timings[name]
                    t.seconds.append(seconds)
                    t.peak_mib.append(peak_mib(pid))
                    t.jobs.append(jobs)
                    t.rows = rows
                    if name.startswith("(a)"):
                        t.steps.append(_steps(log, began + seconds))
            results[size] = timings
            report(size, timings)
    if ns.home is None:
        shutil.rmtree(home, ignore_errors=True)


def report(size: int, timings: dict[str, Timings]) -> None:
    print(f"\n{size:,} impressions, one day, {len(next(iter(timings.values())).seconds)} runs each (median [min..max])")
    print(f"{'':30} {'seconds':>22} {'rows/s':>9} {'peak MiB':>9} {'Spark jobs':>11}")
    for name, t in timings.items():
        spread = f"{t.median():6.1f} [{min(t.seconds):5.1f}..{max(t.seconds):5.1f}]"
        jobs = f"{statistics.median(t.jobs):.0f}" if name[1] in "ab" else "-"
        print(f"{name:30} {spread:>22} {t.rows / t.median():9,.0f} {max(t.peak_mib):9,.0f} {jobs:>11}")
    by = {name[1]: t for name, t in timings.items()}
    if "a" in by and "b" in by:
        print(f"(a)/(b) time: {by['a'].median() / by['b'].median():.2f}x (target at most 1.5x)")
    if "b" in by and "c" in by:
        print(f"(b)/(c) time: {by['b'].median() / by['c'].median():.2f}x")
    if "a" in by:
        steps = {k: statistics.median(s.get(k, 0.0) for s in by["a"].steps) for k in by["a"].steps[0]}
        gate = sum(v for k, v in steps.items() if k in ("validating", "publishing", "refused;"))
        print("(a) by step (median s): " + ", ".join(f"{k} {v:.1f}" for k, v in steps.items())
              + f"; gate (validate + publish) {gate:.1f}s = {gate / by['a'].median():.0%} of (a) (target at most 25%)")
    print(flush=True)


if __name__ == "__main__":
    main()
