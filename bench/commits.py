"""Benchmark: what a Delta table's commit history costs, and what OPTIMIZE and checkpoints give back.

    .venv/bin/python -m bench.commits                 # 20 and 200 commits of 500 rows
    .venv/bin/python -m bench.commits --commits 20 200 1000 --rows 500

A streaming label join commits once per micro-batch, so its tables collect many small commits
and files. On one table, built by appending ``--rows`` rows per commit (the shape of a small
micro-batch: 24 columns, as a staging table's keys, labels and some features), this measures:

* **commit**: the time of one more append, by Spark (``df.write.format("delta").mode("append")``)
  and by ``deltalake`` (``write_deltalake``), once the table has 20 and 200 commits;
* **open**: the time to open the table, Spark (its snapshot cache cleared: ``DeltaLog.clearCache``,
  then ``spark.read.format("delta").load``) and ``deltalake`` (``DeltaTable(path)``), at 20 and 200
  commits, with no checkpoint (the table is made with ``delta.checkpointInterval`` out of reach),
  then at the last count again after one checkpoint;
* **micro-batches**: writing the same rows as N commits against one commit (deltalake, measured:
  the N commits' total is their own sum of times), and reading the table back (Spark, a sum over
  every row) from N small files against the same rows after ``OPTIMIZE`` compacted them.

Every figure is the median of ``--runs`` runs after a warm-up, with min and max.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.common import figure, ratio, rounds, say, spread, summary

NEVER = "1000000"  # a checkpoint interval no run reaches


def batch(rows: int, seed: int) -> pa.Table:
    """One micro-batch: keys, two labels, 20 dense features."""
    rng = np.random.default_rng(seed)
    columns = {"impression_id": pa.array([f"i{seed}-{i}" for i in range(rows)]),
               "label_click": pa.array((rng.random(rows) < 0.03).astype(np.int32)),
               "label_conversion": pa.array((rng.random(rows) < 0.003).astype(np.int32)),
               "ds": pa.array(["2026-11-01"] * rows)}  # fmt: skip
    columns |= {f"dense_{i:02d}": pa.array(rng.lognormal(0, 1, rows).astype(np.float32)) for i in range(20)}
    return pa.table(columns)


def append(path: Path, table: pa.Table) -> None:
    from deltalake import PostCommitHookProperties, write_deltalake

    write_deltalake(str(path), table, mode="append", partition_by=["ds"], configuration={
        "delta.checkpointInterval": NEVER}, post_commithook_properties=PostCommitHookProperties(create_checkpoint=False,
                                                                                                 cleanup_expired_logs=False))  # fmt: skip


class CommitTable:
    """The measured table at ``work / "micro"`` and its contenders: opening it and one more commit, by Spark and by
    ``deltalake``; a scan of it by Spark. Each contender returns its measures for :func:`common.rounds`."""

    def __init__(self, spark, work: Path, rows: int) -> None:
        self.spark, self.path, self.rows = spark, work / "micro", rows
        self.seed = iter(range(10**9))
        self.deltalake_commit_s: list[float] = []  # every deltalake commit's time, the ones building the table too
        self.delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog
        self.spark_batch = spark.createDataFrame(batch(rows, 10**9).to_pandas())  # a seed no deltalake commit uses
        self.spark_batch.cache().count()

    def spark_open(self) -> dict:
        self.delta_log.clearCache()
        began = time.perf_counter()
        self.spark.read.format("delta").load(str(self.path)).schema
        return {"seconds": time.perf_counter() - began}

    def deltalake_open(self) -> dict:
        from deltalake import DeltaTable

        began = time.perf_counter()
        DeltaTable(str(self.path)).version()
        return {"seconds": time.perf_counter() - began}

    def spark_commit(self) -> dict:
        self.spark_batch.write.format("delta").mode("append").save(str(self.path))
        return {}

    def deltalake_commit(self) -> dict:
        data = batch(self.rows, next(self.seed))
        began = time.perf_counter()
        append(self.path, data)
        return {"seconds": time.perf_counter() - began}

    def spark_scan(self) -> dict:
        self.spark.read.format("delta").load(str(self.path)).selectExpr("sum(dense_00)", "count(*)").collect()
        return {}

    def version(self) -> int:
        """Commits so far (version 0 is the first)."""
        from deltalake import DeltaTable

        return DeltaTable(str(self.path)).version() + 1 if (self.path / "_delta_log").exists() else 0

    def build_to(self, count: int) -> None:
        """Commit with deltalake until the table has ``count`` commits."""
        while self.version() < count:
            self.deltalake_commit_s.append(self.deltalake_commit()["seconds"])

    def files(self) -> int:
        from deltalake import DeltaTable

        return len(DeltaTable(str(self.path)).file_uris())


class OneCommit:
    """Every row the deltalake commits wrote, written again as one commit into a fresh table at ``path``."""

    def __init__(self, path: Path, rows: pa.Table) -> None:
        self.path, self.rows = path, rows

    def __call__(self) -> dict:
        shutil.rmtree(self.path, ignore_errors=True)
        began = time.perf_counter()
        append(self.path, self.rows)
        return {"seconds": time.perf_counter() - began}


def _opens(table: CommitTable, runs: int, label: str) -> dict[str, list[dict]]:
    return rounds({"Spark open": table.spark_open, "deltalake open": table.deltalake_open}, runs, label=label)


def _at_counts(table: CommitTable, commit_counts: tuple[int, ...], runs: int) -> dict:
    """Open and commit times by engine once the table has each of ``commit_counts`` commits, no checkpoint yet."""
    at = {}
    for count in commit_counts:
        say(f"commits: building the table to {count} commits of {table.rows} rows (deltalake)")
        table.build_to(count)
        opens = _opens(table, runs, f"commits {count}: ")
        commits = rounds({"Spark commit": table.spark_commit, "deltalake commit": table.deltalake_commit}, runs,
                         label=f"commits {count}: ")  # fmt: skip
        at[str(count)] = {name: figure(r) for name, r in {**opens, **commits}.items()}
    return at


def _micro_batches(table: CommitTable, work: Path, rows: int, runs: int) -> dict:
    """The deltalake commits so far against the same rows in one commit."""
    all_rows = pa.concat_tables([batch(rows, s) for s in range(len(table.deltalake_commit_s))])  # what they wrote
    one = figure(rounds({"one commit": OneCommit(work / "bulk", all_rows)}, runs, label="commits: ")["one commit"])
    dl_commit_s = table.deltalake_commit_s
    commits = {"n": len(dl_commit_s), "total_s": sum(dl_commit_s), **summary(dl_commit_s)}
    commits.pop("runs")
    return {"one_commit_of_all_rows": one, "deltalake_commits": commits}


def _optimized_scan(spark, table: CommitTable, runs: int) -> dict:
    """A Spark scan of the table's small files, OPTIMIZE, the scan again: ``optimize_s`` and ``scan``."""
    files_before = table.files()
    before = rounds({"scan": table.spark_scan}, runs, label=f"commits: {files_before} small files, ")["scan"]
    began = time.perf_counter()
    spark.sql(f"OPTIMIZE delta.`{table.path}`").collect()
    optimize_s = time.perf_counter() - began
    files_after = table.files()
    after = rounds({"scan": table.spark_scan}, runs, label=f"commits: after OPTIMIZE ({files_after} files), ")["scan"]
    return {"optimize_s": optimize_s,
            "scan": {"files_before": files_before, "files_after": files_after, "before": figure(before),
                     "after": figure(after), "before/after": ratio(before, after)}}  # fmt: skip


def section(work: Path, *, commit_counts: tuple[int, ...] = (20, 200), rows: int = 500, runs: int = 3) -> dict:
    from deltalake import DeltaTable

    from warehouse.session import spark_session

    out: dict = {"rows_per_commit": rows, "commit_counts": list(commit_counts), "at": {}}
    with spark_session(work / "spark", conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}) as spark:
        spark.range(10).count()
        table = CommitTable(spark, work, rows)
        out["at"] = _at_counts(table, commit_counts, runs)
        last = str(commit_counts[-1])
        began = time.perf_counter()
        DeltaTable(str(table.path)).create_checkpoint()
        out["checkpoint_s"] = time.perf_counter() - began
        opens = _opens(table, runs, f"commits {last}, checkpointed: ")
        out["at"][last + "+checkpoint"] = {name: figure(r) for name, r in opens.items()}
        # many small commits against one: the same rows, written by deltalake
        out |= _micro_batches(table, work, rows, runs)
        out |= _optimized_scan(spark, table, runs)
    return out


def report(out: dict) -> str:
    lines = [f"Delta commits of {out['rows_per_commit']} rows (median [min..max] of each figure):"]
    for at, figures in out["at"].items():
        lines.append(f"  after {at.replace('+checkpoint', ' commits and a checkpoint') if '+' in at else at + ' commits'}: " + ", ".join(f"{k} {spread(v, 's', 3)}" for k, v in figures.items()))
    dc = out["deltalake_commits"]
    lines.append(f"  {dc['n']} deltalake commits took {dc['total_s']:.1f}s ({dc['median'] * 1000:.0f} ms each, median); "
                 f"the same rows in one commit {spread(out['one_commit_of_all_rows'], 's', 3)}")  # fmt: skip
    s = out["scan"]
    lines.append(f"  Spark scan of {s['files_before']} small files {spread(s['before'], 's', 3)}; after OPTIMIZE "
                 f"({out['optimize_s']:.1f}s) {s['files_after']} file(s) {spread(s['after'], 's', 3)}: "
                 f"{s['before/after']['median']:.2f}x faster; a checkpoint took {out['checkpoint_s']:.2f}s")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, nargs="+", default=[20, 200], help="commit counts to measure at")
    parser.add_argument("--rows", type=int, default=500, help="rows per commit")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each figure, after one warm-up")
    parser.add_argument("--work", type=Path, default=None, help="a fresh folder (default: a temp dir)")
    ns = parser.parse_args(argv)
    work = ns.work or Path(tempfile.mkdtemp(prefix="commits_bench_"))
    print(report(section(work, commit_counts=tuple(sorted(ns.commits)), rows=ns.rows, runs=ns.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
