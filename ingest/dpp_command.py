"""``featurehouse dpp``: a preprocessing-service session for a job spec, on a Ray cluster or a local Ray instance.

    featurehouse dpp --job jobs/ctr_demo.yaml                         # a local Ray instance, started and stopped here
    featurehouse dpp --job jobs/ctr_demo.yaml --address auto --workers 2:8   # the cluster `ray start` made

It delivers every batch of the job's epochs from the service's workers to this process (the
session's client), printing at intervals the worker processes that have delivered batches, the
splits done and pending, the samples/s delivered and how much of the time the client waited (no
trainer runs here: it only waits, so this is near 100%), then the read's cost, and records the
session once in ``featurehouse_catalog.feature_usage``. ``featurehouse train --dpp`` trains from
the same service. The local Ray instance listens on 127.0.0.1 only, with token authentication
(see ``ingest.dpp.ray_session``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ingest.dpp import REPORT_EVERY_S, DppLoader, parse_workers, ray_session
from ingest.job_reader import open_reader
from ingest.read_command import record, summarize
from ingest.spec import load_spec
from schemas.config import POSITIVE_INT, POSITIVE_SECONDS, ReaderJobConfig, satisfies
from schemas.errors import ConfigError
from schemas.exit import run_command
from schemas.names import format_ds
from schemas.paths import default_home
from schemas.storage import add_profile_argument, reader_store
from schemas.progress import Progress


@dataclass(frozen=True, kw_only=True)
class DppConfig(ReaderJobConfig):
    job: Path
    address: str | None = None
    workers: tuple[int, int] = (1, 2)
    epochs: int = 1
    version: int | None = None
    record: bool = True
    report_every: float = REPORT_EVERY_S

    def __post_init__(self) -> None:
        if not satisfies(self.epochs, POSITIVE_INT):
            raise ConfigError(f"--epochs {self.epochs} must be a positive number of epochs")
        if not satisfies(self.report_every, POSITIVE_SECONDS):
            raise ConfigError(f"--report-every {self.report_every} must be a positive number of seconds")


def run(config: DppConfig, *, progress: Progress = print):
    spec, registry = load_spec(config.job, registry_dir=config.registry_dir)
    warehouse = reader_store(config.home, config.profile)
    started_at = dt.datetime.now(dt.UTC)
    started = time.perf_counter()
    reader = open_reader(spec, registry, warehouse=warehouse, version=config.version)
    low, high = config.workers
    progress(f"dpp {spec.job_id}: {spec.dataset} version {reader.snapshot.version}, ds {format_ds(spec.days[0])} .. "
             f"{format_ds(spec.days[-1])}, {len(reader.snapshot.files)} files, {len(spec.features)} of "
             f"{len(registry.stored_features)} features, {config.epochs} epoch{'s' if config.epochs > 1 else ''} of "
             f"{len(reader.dataset):,} batches of {spec.batch_size}; {low}-{high} workers on "
             f"{config.address or 'a local Ray instance'}")  # fmt: skip
    with ray_session(config.address):
        loader = DppLoader(reader.dataset, workers=config.workers, epochs=config.epochs, progress=progress,
                           report_every=config.report_every)  # fmt: skip
        try:
            for _epoch in range(config.epochs):
                for _batch in loader:
                    pass
        finally:
            loader.close()
    progress(f"  made by {len(loader.workers_seen)} worker process(es): "
             + ", ".join(f"{where} {count:,} batches" for where, count in sorted(loader.workers_seen.items())))
    usage = summarize(spec, reader, loader.counter, started=started, started_at=started_at,
                      where="the service's workers", progress=progress)  # fmt: skip
    if config.record:
        record(warehouse, usage, progress=progress)
    return usage


def parse_args(argv: Sequence[str] | None = None) -> DppConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse dpp",
        description="Run a preprocessing-service session for a job spec: the reader's projected reads, transforms "
        "and batching on an autoscaled pool of Ray workers (Ray Data), every batch delivered here; print progress "
        "and the read's cost, and record the session in featurehouse_catalog.feature_usage.",
    )
    parser.add_argument("--job", type=Path, required=True, help="the job spec YAML (the session's spec)")
    parser.add_argument("--address", default=None,
                        help="a running Ray cluster: auto, HOST:6379 or ray://HOST:10001 (default: start a local "
                             "Ray instance for this command, listening on 127.0.0.1 only, and stop it at the "
                             "end)")  # fmt: skip
    parser.add_argument("--workers", default="1:2", help="MIN:MAX workers the pool scales between, or N (default 1:2)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs to deliver (default 1)")
    parser.add_argument("--version", type=int, default=None, help="read this Delta version (default: the latest)")
    parser.add_argument("--report-every", type=float, default=REPORT_EVERY_S,
                        help="seconds between progress lines (default %(default)s)")  # fmt: skip
    parser.add_argument("--no-record", action="store_true", help="do not record the session in feature_usage")
    parser.add_argument("--home", type=Path, default=None,
                        help="data folder holding warehouse/ (default: $FEATUREHOUSE_HOME or ./data)")  # fmt: skip
    parser.add_argument("--registry-dir", type=Path, default=None, help="folder of registry files")
    add_profile_argument(parser)
    ns = parser.parse_args(argv)
    return DppConfig(job=ns.job, home=(ns.home or default_home()).resolve(), address=ns.address,
                     workers=parse_workers(ns.workers), epochs=ns.epochs, version=ns.version,
                     record=not ns.no_record, registry_dir=ns.registry_dir, profile=ns.profile, report_every=ns.report_every)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(lambda: run(parse_args(argv)) and None)


if __name__ == "__main__":
    raise SystemExit(main())
