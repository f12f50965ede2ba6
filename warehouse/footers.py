"""A Delta partition's data files and what each column takes in them, without a JVM.

Delta's log is read with ``deltalake`` (never parsed here); the sizes come from
the Parquet footers, read with pyarrow. Column mapping is honoured: a column is
found in the files under its *physical* name (``col-<uuid>`` on tables created
with ``delta.columnMapping.mode = name``; it stays the same through a
``RENAME COLUMN``), else under its logical name.

    snapshot = open_snapshot("file:/data/warehouse/featurehouse.db/ads")
    uris = partition_files(snapshot, "2026-11-01")
    column_bytes(uris, physical_names(snapshot, ["user_ctr_7d"]).values())
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import deltalake
import pyarrow.parquet as pq
from deltalake.exceptions import DeltaError
from pyarrow import fs as pafs

from schemas.errors import TableError
from schemas.registry import PARTITION_COLUMN

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
#: Footers are small reads; on object stores they are latency-bound, so read a few at a time.
FOOTER_THREADS = 16


def open_snapshot(location: str, *, version: int | None = None) -> deltalake.DeltaTable:
    """The Delta table at ``location`` pinned at ``version`` (default: its latest version)."""
    try:
        return deltalake.DeltaTable(location, version=version)
    except (DeltaError, OSError, ValueError) as err:
        at = "its latest version" if version is None else f"version {version}"
        reason = " ".join(str(err).split())  # one line: the CLI prints errors as one
        raise TableError(
            f"cannot read the Delta log of {location} at {at}: {reason}; check that the path is a Delta table "
            "and that the version exists (DESCRIBE HISTORY)"
        ) from err


def physical_names(snapshot: deltalake.DeltaTable, columns: Iterable[str]) -> dict[str, str]:
    """Logical -> physical name of each top-level column in ``columns`` (the logical name without mapping)."""
    fields = {field.name: field for field in snapshot.schema().fields}
    names: dict[str, str] = {}
    for column in columns:
        if column not in fields:
            raise TableError(
                f"column {column!r} is not in the Delta schema of {snapshot.table_uri} at version "
                f"{snapshot.version()}; columns there: {', '.join(fields)}"
            )
        names[column] = str(fields[column].metadata.get(PHYSICAL_NAME_KEY) or column)
    return names


def partition_files(snapshot: deltalake.DeltaTable, ds: str) -> list[str]:
    """URIs of the data files of partition ``ds`` in the snapshot (local files: plain paths)."""
    return sorted(snapshot.file_uris(file_pruning_predicate=[(PARTITION_COLUMN, "=", ds)]))


def _footer_bytes(uri: str, columns: Sequence[str]) -> dict[str, int]:
    filesystem, path = pafs.FileSystem.from_uri(uri)
    metadata = pq.read_metadata(path, filesystem=filesystem)
    sizes = dict.fromkeys(columns, 0)
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            top = chunk.path_in_schema.split(".", 1)[0]  # names hold no dots: NAME_PATTERN, col-<uuid>
            if top in sizes:
                sizes[top] += chunk.total_compressed_size
    return sizes


def column_bytes(uris: Sequence[str], columns: Iterable[str]) -> dict[str, int]:
    """Compressed bytes of each physical top-level column over the files ``uris``, from their footers.

    A column's bytes are the ``total_compressed_size`` of every column chunk whose
    ``path_in_schema`` is the column or lies under it (``col.list.element.id``, ...),
    in every row group. A column absent from a file counts 0 there.
    """
    names = list(dict.fromkeys(columns))
    totals = dict.fromkeys(names, 0)
    if not uris or not names:
        return totals
    with ThreadPoolExecutor(max_workers=min(FOOTER_THREADS, len(uris))) as pool:
        futures = {uri: pool.submit(_footer_bytes, uri, names) for uri in uris}
        for uri, future in futures.items():
            try:
                sizes = future.result()
            except (OSError, ValueError) as err:
                raise TableError(
                    f"cannot read the Parquet footer of {uri}: {err}; the file is listed by the Delta log but "
                    "missing or unreadable (was it vacuumed or deleted by hand?)"
                ) from err
            for name, size in sizes.items():
                totals[name] += size
    return totals


def bytes_by_column(uris: Sequence[str], physical: Mapping[str, str]) -> dict[str, int]:
    """Compressed bytes by *logical* column, given logical -> physical names."""
    by_physical = column_bytes(uris, physical.values())
    return {logical: by_physical[name] for logical, name in physical.items()}
