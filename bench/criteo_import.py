"""Criteo import throughput: `featurehouse import criteo` against two peers, on the same file, in one run.

    .venv/bin/python -m bench.criteo_import --rows 1000000 --days 7          # a Kaggle-like train.txt
    .venv/bin/python -m bench.criteo_import --rows 1000000 --days 7 --gzip   # the same lines gzip-compressed

The file is written first by ``featurehouse criteo-sample`` (the published layout; the real files
cannot be downloaded here). Then, each timed on its own:

* **featurehouse**: the import as the CLI runs it: parse, quarantine, number lines, split into
  days, one metrics pass over the file's days, then per day judge (Great Expectations), publish and
  record, in a Spark session.
* **DLRM reference parse** (peer): what the DLRM reference's preprocessing does per line in
  Python (``getCriteoAdData`` in facebookresearch/dlrm's ``data_utils.py``): split on tabs,
  ``int()`` each integer (missing 0), ``int(x, 16)`` each categorical, into numpy arrays, one
  ``.npz`` per day. No checks: a malformed line raises. One core.
* **Spark, no checks** (peer): the same Spark session reads the file with ``read.csv``, converts
  the fields the same way and writes one Delta table, once: no validation, quarantine, line
  numbers, days, staging or gate. What the import's checks cost is the difference.

Each contender runs ``--runs`` times (default 3) after one warm-up run, in an order that rotates
from round to round, in one Spark session started before any clock runs; the median counts.
Prints lines per second of each and the time ratios. Uses a fresh folder (``--home``, default a
temp dir).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from tabulate import tabulate


def reference_parse(path: Path, days: int, out: Path) -> int:
    """The DLRM reference's way: a Python loop over lines into numpy arrays, one npz per day."""
    from etl.criteo.importer import split_sizes

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        total = sum(1 for _ in handle)
    sizes = split_sizes(total, days)
    with opener(path, "rt") as handle:
        for day, size in enumerate(sizes):
            y = np.zeros(size, dtype=np.int32)
            x_int = np.zeros((size, 13), dtype=np.int32)
            x_cat = np.zeros((size, 26), dtype=np.int64)
            for i in range(size):
                fields = handle.readline().rstrip("\n").split("\t")
                y[i] = int(fields[0])
                x_int[i] = [int(v) if v else 0 for v in fields[1:14]]
                x_cat[i] = [int(v, 16) if v else 0 for v in fields[14:]]
            np.savez_compressed(out / f"day_{day}.npz", X_int=x_int, X_cat=x_cat, y=y)
    return total


def spark_bare(spark, path: Path, table_path: Path) -> int:
    """One read, the same conversions, one Delta write: no checks."""
    from pyspark.sql import functions as F

    from schemas.criteo import DENSE_FEATURES, SPARSE_FEATURES

    schema = ", ".join(["label int", *(f"{n} string" for n in DENSE_FEATURES), *(f"{n} string" for n in SPARSE_FEATURES)])
    frame = spark.read.options(sep="\t", mode="PERMISSIVE").schema(schema).csv(str(path))
    converted = frame.select(
        "label",
        *[F.col(n).try_cast("bigint").cast("float").alias(n) for n in DENSE_FEATURES],
        *[F.when(F.col(n).isNull(), F.array().cast("array<bigint>"))
          .otherwise(F.array(F.conv(F.col(n), 16, 10).try_cast("bigint"))).alias(n) for n in SPARSE_FEATURES],
    )  # fmt: skip
    converted.write.format("delta").mode("overwrite").save(str(table_path))
    return spark.read.format("delta").load(str(table_path)).count()


class FeaturehouseImport:
    """``etl.criteo.importer.run`` as ``featurehouse import criteo`` runs it; a rerun replaces the same days."""

    def __init__(self, spark, config) -> None:
        from etl.criteo import importer as criteo_import

        self.spark, self.config, self.run = spark, config, criteo_import.run

    def __call__(self) -> int:
        summary = self.run(self.spark, self.config)  # a rerun replaces the same days
        return summary.lines


class PlainSparkImport:
    """:func:`spark_bare`: one Spark read, the conversions, one Delta write, no checks."""

    def __init__(self, spark, path: Path, table_path: Path) -> None:
        self.spark, self.path, self.table_path = spark, path, table_path

    def __call__(self) -> int:
        return spark_bare(self.spark, self.path, self.table_path)


class ReferenceParse:
    """:func:`reference_parse` into a fresh ``out`` folder."""

    def __init__(self, path: Path, days: int, out: Path) -> None:
        self.path, self.days, self.out = path, days, out

    def __call__(self) -> int:
        shutil.rmtree(self.out, ignore_errors=True)
        self.out.mkdir()
        return reference_parse(self.path, self.days, self.out)


def timed_rounds(contenders: dict, runs: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Each contender's seconds over ``runs`` runs after a warm-up round, the order rotating; the lines each read."""
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    lines: dict[str, int] = {}
    names = list(contenders)
    for round_ in range(runs + 1):  # round 0 warms up; the order rotates from round to round
        for name in names[round_ % len(names):] + names[: round_ % len(names)]:
            began = time.perf_counter()
            lines[name] = contenders[name]()
            took = time.perf_counter() - began
            print(f"  {'warm-up' if round_ == 0 else f'run {round_}'}: {name} {took:.1f}s", flush=True)
            if round_:
                seconds[name].append(took)
    return seconds, lines


def print_figures(seconds: dict[str, list[float]], lines: dict[str, int], rows: int, ns: argparse.Namespace) -> None:
    base = statistics.median(seconds["featurehouse import criteo"])
    print(f"\n{rows:,} lines, {'gzip' if ns.gzip else 'plain'}, {ns.days} days, local Spark on this machine, "
          f"{ns.runs} runs each after a warm-up (median [min..max])")  # fmt: skip
    rows = []
    for name, runs in seconds.items():
        median = statistics.median(runs)
        rows.append((name, f"{median:6.1f} [{min(runs):5.1f}..{max(runs):5.1f}]", f"{lines[name] / median:,.0f}",
                     f"{base / median:.2f}x"))  # fmt: skip
    print(tabulate(rows, headers=("", "seconds", "lines/s", "featurehouse time / this"), tablefmt="plain",
                   colalign=("left", "right", "right", "right"), disable_numparse=True))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--gzip", action="store_true", help="write and read the file gzip-compressed")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each contender, after one warm-up")
    parser.add_argument("--home", type=Path, default=None, help="a fresh folder for the run (default: a temp dir)")
    ns = parser.parse_args()

    from etl.criteo import importer as criteo_import
    from etl.criteo.sample import write_sample
    from warehouse.session import spark_session

    home = ns.home or Path(tempfile.mkdtemp(prefix="criteo_bench_"))
    home.mkdir(parents=True, exist_ok=True)
    path = home / ("train.txt.gz" if ns.gzip else "train.txt")
    started = time.perf_counter()
    sample = write_sample(path, ns.rows, seed=0)
    print(f"wrote {path}: {sample.rows:,} lines, {path.stat().st_size / 2**20:,.1f} MiB "
          f"in {time.perf_counter() - started:.1f}s")  # fmt: skip

    with spark_session(home, conf={"spark.ui.enabled": "false"}) as spark:
        spark.sparkContext.setLogLevel("ERROR")
        spark.range(1000).count()  # start the executors before any clock runs
        config = criteo_import.CriteoImportConfig(dataset="criteo_bench", ds=dt.date(2026, 1, 1), files=(str(path),),
                                                  home=home, split_days=ns.days, registry_dir=home / "registry")  # fmt: skip
        contenders = {
            "featurehouse import criteo": FeaturehouseImport(spark, config),
            "Spark, no checks (peer)": PlainSparkImport(spark, path, home / "bare_delta"),
            "DLRM reference parse, Python (peer)": ReferenceParse(path, ns.days, home / "npz"),
        }
        seconds, lines = timed_rounds(contenders, ns.runs)

    print_figures(seconds, lines, sample.rows, ns)
    if ns.home is None:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
