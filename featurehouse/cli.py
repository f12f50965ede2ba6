"""``featurehouse``: one command, a subcommand per job. Run ``featurehouse <command> --help``.

Each subcommand is a module with ``main(argv) -> int`` (the same function
spark-submit runs). Modules are imported only when chosen, so
``featurehouse --help`` starts no JVM.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from schemas.errors import EXIT_ERROR

#: subcommand -> (module with main(argv), one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("featurehouse.demo", "the main job: 7 days of logs label-joined while the schema evolves, catalog stats, SQL"),
    "generate": ("etl.generate.job", "write seeded impression and label logs into the landing zone"),
    "produce": ("etl.kafka.produce", "publish landing-zone logs to Kafka hour by hour, for the streaming job"),
    "import": ("etl.criteo.importer", "import Criteo's published click logs (Kaggle, 1TB) as date-partitioned days"),
    "criteo-sample": ("etl.criteo.sample", "write a synthetic Criteo-format file with a planted signal (no download)"),
    "label-join": ("etl.label_join", "join one ds of impressions with their labels into featurehouse.<dataset>"),
    "stream": ("etl.stream.job", "join impressions and labels as they arrive (files or Kafka), exactly once; publish closed days"),
    "stream-publish": ("etl.stream.publish", "validate and publish the days a stream has closed (run by `stream`)"),
    "publish": ("etl.maintenance.publish", "publish a partition the quality gate refused: validated again, or --force --reason"),
    "features": ("etl.maintenance.features", "diff: show what a registry change does to its table; apply: do it (no file rewritten)"),
    "backfill": ("etl.maintenance.backfill", "fill a derived feature into past partitions, one commit per partition, verified"),
    "retention": ("etl.maintenance.retention", "drop partitions older than each dataset's retention, then vacuum (dry run unless --apply)"),
    "optimize": ("etl.maintenance.optimize", "order a table's columns by feature popularity; rewrite partitions to follow it, verified"),
    "catalog": ("etl.maintenance.catalog", "sync: registry -> feature catalog; stats: one partition's feature statistics"),
    "read": ("ingest.read_command", "read a job spec's partitions and features as torch batches (no JVM); record the run"),
    "dpp": ("ingest.dpp_command", "a preprocessing-service session: the reader's work on Ray workers, batches delivered here"),
    "train": ("trainer.train", "train a job spec's DLRM through the reader, evaluate it, report data stalls; record it"),
    "sql": ("warehouse.sql", "run Spark SQL against the warehouse metastore and print the result"),
    "engine": ("warehouse.engine.command", "start|stop|status|logs: the home's resident Spark session, shared by the commands"),
    "cluster": ("featurehouse.cluster", "up|down|status: a Spark standalone cluster, PostgreSQL metastore and Thrift server here"),
    "metastore": ("warehouse.metastore", "init: make a shared (PostgreSQL) metastore's schema, once"),
    "bench": ("featurehouse.bench", "the benchmark suite against peers (Spark, DuckDB, Polars, pyarrow, Petastorm); --quick"),
    "spark-args": ("featurehouse.spark_args", "print spark-sql/spark-submit arguments that reach the same warehouse"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="featurehouse",
        description="A Spark and Delta feature warehouse for recommendation-model training.",
        epilog="Data lives under --home (default $FEATUREHOUSE_HOME, else this checkout's data/). Spark settings: --conf key=value "
        "on every Spark command. Details: featurehouse COMMAND --help",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        build_parser().parse_args(argv)  # prints usage, or --help, and exits
        return EXIT_ERROR
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return int(module.main(argv[1:]))


if __name__ == "__main__":
    raise SystemExit(main())
