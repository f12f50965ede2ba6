"""What each column of a Delta partition takes on disk, from its files' Parquet footers, without a JVM.

The files and the columns' physical names come from the pinned snapshot of
``schemas/delta_snapshot.py`` (Delta's log, read with ``deltalake``; column mapping
honoured); the sizes come from the Parquet footers, read with pyarrow.

    snapshot = open_snapshot("file:/data/warehouse/featurehouse.db/ads", [dt.date(2026, 11, 1)])
    uris = [f.uri for f in snapshot.files]
    bytes_by_column(uris, physical_names(snapshot, ["user_ctr_7d"]))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow.parquet as pq
from pyarrow import fs as pafs

from schemas.errors import TableError

#: Footers are small reads; on object stores they are latency-bound, so read a few at a time.
FOOTER_THREADS = 16


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
