"""A feature table pinned at one Delta version, read from Delta's log with ``deltalake`` (no JVM, no Spark).

The one snapshot opener of featurehouse: the reader (``ingest/snapshot.py``) and the
catalog's bytes-on-disk statistics (``warehouse/stats.py``) both take their file lists
and column names from here. Directories are never listed: the data files of the chosen
partitions, their sizes and row counts, and the physical name of every column all come
from the log at one version. Column mapping is honoured: a column is found in the files
under its *physical* name (``col-<uuid>`` on tables created with
``delta.columnMapping.mode = name``; it stays the same through a ``RENAME COLUMN``),
else under its logical name.

    snapshot = open_snapshot("file:/data/warehouse/featurehouse.db/ads", [dt.date(2026, 11, 1)])
    snapshot.version, [f.uri for f in snapshot.files], physical_names(snapshot, ["user_ctr_7d"])

``deltalake`` is imported when a snapshot is opened, not with this module.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from schemas.errors import TableError
from schemas.names import format_ds
from schemas.registry import PARTITION_COLUMN
from schemas.storage import Store, s3_uri

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"


@dataclass(frozen=True)
class DataFile:
    """One Parquet data file of a partition, as the Delta log lists it."""

    uri: str
    ds: str
    size: int
    rows: int | None  # from the log's file statistics, when written


@dataclass(frozen=True)
class Snapshot:
    """A feature table at one version: its columns' physical names and the files of the chosen partitions."""

    table_uri: str
    version: int
    physical: Mapping[str, str]  # logical column -> name in the Parquet files, every top-level column
    files: tuple[DataFile, ...]  # of the chosen partitions, ordered by ds then path
    missing_days: tuple[str, ...]  # chosen partitions the table does not have
    min_reader_version: int  # of the table's protocol: what a reader must handle to read its files
    reader_features: frozenset[str]
    store: Store | None = None  # how to reach the files (S3 endpoint and keys); None: local paths

    @property
    def rows(self) -> int:
        return sum(f.rows or 0 for f in self.files)


def open_snapshot(table_uri: str, days: Iterable[dt.date], *, version: int | None = None,
                  store: Store | None = None) -> Snapshot:  # fmt: skip
    """The table at ``table_uri`` pinned at ``version`` (default: latest), with the files of ``days``; ``store``
    reaches a table on S3 (its endpoint and credentials)."""
    import deltalake
    import pyarrow as pa
    from deltalake.exceptions import DeltaError, TableNotFoundError

    if store is not None:
        table_uri = s3_uri(table_uri)  # deltalake and pyarrow call it s3://, Hadoop s3a://
    try:
        table = deltalake.DeltaTable(table_uri, version=version,
                                     storage_options=None if store is None else store.delta_options())  # fmt: skip
    except (DeltaError, OSError, ValueError) as err:
        if store is not None and store.on_s3 and not isinstance(err, TableNotFoundError):
            raise store.unreachable(f"the Delta log of {table_uri}", err) from err
        at = "its latest version" if version is None else f"version {version}"
        reason = " ".join(str(err).split())  # one line: the CLI prints errors as one
        raise TableError(
            f"cannot read the Delta log of {table_uri} at {at}: {reason}; check that the path is a Delta table "
            "(a feature table's folder under <home>/warehouse/featurehouse.db/) and that the version exists "
            "(DESCRIBE HISTORY)"
        ) from err
    physical = {
        field.name: str(field.metadata.get(PHYSICAL_NAME_KEY) or field.name) for field in table.schema().fields
    }
    wanted = [format_ds(d) for d in days]
    actions = pa.table(table.get_add_actions(flatten=True))
    partition = f"partition.{PARTITION_COLUMN}"
    if partition not in actions.column_names:
        raise TableError(f"Delta table {table_uri} is not partitioned by {PARTITION_COLUMN}; it is not a feature table")
    root = table.table_uri.rstrip("/")
    files = sorted(
        (
            DataFile(uri=f"{root}/{path}", ds=ds, size=int(size), rows=None if rows is None else int(rows))
            for path, ds, size, rows in zip(
                actions.column("path").to_pylist(),
                actions.column(partition).to_pylist(),
                actions.column("size_bytes").to_pylist(),
                actions.column("num_records").to_pylist(),
                strict=True,
            )
            if ds in wanted
        ),
        key=lambda f: (f.ds, f.uri),
    )
    present = {f.ds for f in files}
    protocol = table.protocol()
    return Snapshot(
        table_uri=root,
        version=table.version(),
        physical=physical,
        files=tuple(files),
        missing_days=tuple(d for d in wanted if d not in present),
        min_reader_version=protocol.min_reader_version,
        reader_features=frozenset(protocol.reader_features or ()),
        store=store,
    )


def physical_names(snapshot: Snapshot, columns: Iterable[str]) -> dict[str, str]:
    """Logical -> physical name of each top-level column in ``columns`` (the logical name without mapping)."""
    names: dict[str, str] = {}
    for column in columns:
        if column not in snapshot.physical:
            raise TableError(
                f"column {column!r} is not in the Delta schema of {snapshot.table_uri} at version "
                f"{snapshot.version}; columns there: {', '.join(snapshot.physical)}"
            )
        names[column] = snapshot.physical[column]
    return names
