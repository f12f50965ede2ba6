"""A pinned Delta snapshot of a feature table, read from Delta's log with ``deltalake`` (no JVM).

The reader never lists directories: the data files of the requested partitions,
their sizes and row counts, and the physical name of every column (Delta column
mapping: a renamed feature keeps its ``col-<uuid>`` name in the files) all come
from the log at one version.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from schemas.errors import TableError
from schemas.names import format_ds
from schemas.registry import PARTITION_COLUMN

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
#: Reader table features this reader honours; any other one (deletion vectors, ...) is refused.
SUPPORTED_READER_FEATURES = frozenset({"columnMapping", "timestampNtz"})


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
    physical: Mapping[str, str]  # logical column -> name in the Parquet files
    files: tuple[DataFile, ...]  # of the chosen partitions, ordered by ds then path
    missing_days: tuple[str, ...]  # chosen partitions the table does not have

    @property
    def rows(self) -> int:
        return sum(f.rows or 0 for f in self.files)


def _check_protocol(table: object, uri: str) -> None:
    protocol = table.protocol()  # type: ignore[attr-defined]
    unsupported = sorted(set(protocol.reader_features or ()) - SUPPORTED_READER_FEATURES)
    if protocol.min_reader_version > 3 or unsupported:
        raise TableError(
            f"Delta table {uri} needs reader features {', '.join(unsupported) or f'of protocol {protocol.min_reader_version}'} "
            f"that this reader does not handle (it handles {', '.join(sorted(SUPPORTED_READER_FEATURES))}); "
            "rewrite the table without them (e.g. REORG TABLE ... APPLY (PURGE) for deletion vectors)"
        )


def open_snapshot(table_uri: str, days: Iterable[dt.date], *, version: int | None = None) -> Snapshot:
    """The table at ``table_uri`` pinned at ``version`` (default: latest), with the files of ``days``."""
    import deltalake
    from deltalake.exceptions import DeltaError

    try:
        table = deltalake.DeltaTable(table_uri, version=version)
    except (DeltaError, OSError, ValueError) as err:
        at = "its latest version" if version is None else f"version {version}"
        raise TableError(
            f"cannot read the Delta log of {table_uri} at {at}: {' '.join(str(err).split())}; check the path "
            "(a feature table's folder under <home>/warehouse/featurehouse.db/) and the version (DESCRIBE HISTORY)"
        ) from err
    _check_protocol(table, table_uri)
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
    return Snapshot(
        table_uri=root,
        version=table.version(),
        physical=physical,
        files=tuple(files),
        missing_days=tuple(d for d in wanted if d not in present),
    )
