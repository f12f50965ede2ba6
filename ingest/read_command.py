"""``featurehouse read``: run a job spec through the reader, print batch shapes and the accounting.

    featurehouse read --job jobs/ctr_demo.yaml --limit 20

No JVM: the table is read through Delta's log (deltalake) and pyarrow, and the run
is recorded in ``featurehouse_catalog.feature_usage`` with a deltalake append
(``--no-record`` to skip).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ingest.job_reader import open_reader
from ingest.loader import ResumableLoader, SnapshotDataset
from ingest.spec import load_spec
from ingest.usage import UsageRecord, record_usage
from schemas.catalog import FEATURE_USAGE, catalog_table_uri
from schemas.config import NON_NEGATIVE_INT, POSITIVE_INT, ReaderJobConfig, satisfies
from schemas.errors import ConfigError
from schemas.exit import run_command
from schemas.names import format_ds
from schemas.paths import default_home
from schemas.storage import Store, add_profile_argument, reader_store
from schemas.progress import Progress


@dataclass(frozen=True, kw_only=True)
class ReadConfig(ReaderJobConfig):
    job: Path
    limit: int | None = None
    version: int | None = None
    record: bool = True
    workers: int = 0

    def __post_init__(self) -> None:
        if not satisfies(self.limit, POSITIVE_INT, optional=True):
            raise ConfigError(f"--limit {self.limit} must be a positive number of batches")
        if not satisfies(self.workers, NON_NEGATIVE_INT):
            raise ConfigError(f"--workers {self.workers} must be 0 (read in this process) or more")


def _shapes(batch) -> str:
    sparse = f"sparse {len(batch.sparse_keys)} keys, {batch.values.numel():,} ids"
    return f"dense {tuple(batch.dense.shape)}, {sparse}, labels {tuple(batch.labels.shape)}"


def run(config: ReadConfig, *, progress: Progress = print) -> UsageRecord:
    spec, registry = load_spec(config.job, registry_dir=config.registry_dir)
    warehouse = reader_store(config.home, config.profile)
    started_at = dt.datetime.now(dt.UTC)
    started = time.perf_counter()
    reader = open_reader(spec, registry, warehouse=warehouse, version=config.version)
    dataset: SnapshotDataset = reader.dataset
    progress(f"read {spec.job_id}: {warehouse.where()}, {spec.dataset} version {reader.snapshot.version}, ds {format_ds(spec.days[0])} .. "
             f"{format_ds(spec.days[-1])}, {len(reader.snapshot.files)} files, {len(spec.features)} of "
             f"{len(registry.stored_features)} features, {len(dataset):,} batches of {spec.batch_size}")  # fmt: skip
    loader = ResumableLoader(dataset, num_workers=config.workers, epochs=1)
    limit = len(dataset) if config.limit is None else min(config.limit, len(dataset))
    for i, batch in enumerate(itertools.islice(loader, limit)):
        if i < 3:
            progress(f"  batch {i}: {len(batch):,} rows; {_shapes(batch)}")
    where = "its worker" + ("s" if config.workers > 1 else "") if config.workers else "a read-ahead thread"
    usage = summarize(spec, reader, loader.counter, started=started, started_at=started_at, where=where,
                      progress=progress)  # fmt: skip
    if config.record:
        record(warehouse, usage, progress=progress)
    return usage


def summarize(spec, reader, counter, *, started: float, started_at: dt.datetime, where: str,
              progress: Progress) -> UsageRecord:  # fmt: skip
    """Print a read's rows, bytes and time split (``where`` the reading and decoding ran), and its usage record."""
    elapsed = time.perf_counter() - started
    read_bytes = counter.bytes_read
    ratio = counter.bytes_all_columns / read_bytes if read_bytes else 0.0
    progress(f"  {counter.batches:,} batches, {counter.rows:,} rows in {elapsed:.2f}s ({counter.rows / elapsed:,.0f} rows/s)")
    progress(f"  bytes read {read_bytes:,} in {counter.requests:,} requests (planning footers "
             f"{reader.dataset.footer_bytes:,}; between coalesced columns {counter.bytes_wasted:,}, read_gap "
             f"{spec.read_gap}); all columns of these rows: {counter.bytes_all_columns:,} ({ratio:.1f}x more)")  # fmt: skip
    progress(f"  time: I/O {counter.io_s:.2f}s and decoding {counter.decode_s:.2f}s (in {where}), transforms "
             f"{counter.convert_s:.2f}s, shuffling {counter.shuffle_s:.2f}s and batching {counter.assemble_s:.2f}s; waiting for batches "
             f"{counter.wait_s:.2f}s")  # fmt: skip
    return UsageRecord(
        job_id=spec.job_id, dataset=spec.dataset, ds_from=format_ds(spec.days[0]), ds_to=format_ds(spec.days[-1]),
        features=spec.feature_names, bytes_read=read_bytes, rows_read=counter.rows,
        table_version=reader.snapshot.version, started_at=started_at, ended_at=dt.datetime.now(dt.UTC), cost=counter,
    )  # fmt: skip


def record(store: Store, usage: UsageRecord, *, progress: Progress) -> None:
    version = record_usage(catalog_table_uri(store.warehouse, FEATURE_USAGE), [usage], store=store)
    progress(f"  recorded in featurehouse_catalog.feature_usage (version {version}), run {usage.run_id}")


def parse_args(argv: Sequence[str] | None = None) -> ReadConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse read",
        description="Read a job's partitions and features as torch batches (no JVM), print their shapes and what "
        "the read cost, and record the run in featurehouse_catalog.feature_usage.",
    )
    parser.add_argument("--job", type=Path, required=True, help="the job spec YAML (see ingest/spec.py)")
    parser.add_argument("--limit", type=int, default=None, help="stop after N batches (default: the whole epoch)")
    parser.add_argument("--version", type=int, default=None, help="read this Delta version (default: the latest)")
    parser.add_argument("--no-record", action="store_true", help="do not record the run in feature_usage")
    parser.add_argument("--home", type=Path, default=None,
                        help="data folder holding warehouse/ (default: $FEATUREHOUSE_HOME or ./data)")  # fmt: skip
    parser.add_argument("--registry-dir", type=Path, default=None, help="folder of registry files")
    add_profile_argument(parser)
    parser.add_argument("--workers", type=int, default=0,
                        help="DataLoader worker processes (default 0: read in this process, with a read-ahead thread)")
    ns = parser.parse_args(argv)
    return ReadConfig(job=ns.job, home=(ns.home or default_home()).resolve(), limit=ns.limit, version=ns.version,
                      record=not ns.no_record, registry_dir=ns.registry_dir, profile=ns.profile, workers=ns.workers)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(lambda: run(parse_args(argv), progress=print) and None)  # prints as it goes


if __name__ == "__main__":
    raise SystemExit(main())
