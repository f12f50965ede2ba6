"""The reader's pinned Delta snapshot of a feature table: ``schemas/delta_snapshot.py``, plus the reader's check.

The snapshot itself (version, the data files of the requested partitions with their
sizes and row counts, the physical name of every column) comes from Delta's log with
``deltalake``, never from listing directories. What this module adds is the reader's
protocol check: a table that needs reader features the reader does not honour (deletion
vectors, ...) is refused, since its Parquet files alone would give wrong rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from schemas import delta_snapshot
from schemas.delta_snapshot import DataFile, Snapshot
from schemas.errors import TableError
from schemas.storage import Store

__all__ = ["SUPPORTED_READER_FEATURES", "DataFile", "Snapshot", "open_snapshot"]

#: Reader table features this reader honours; any other one (deletion vectors, ...) is refused.
SUPPORTED_READER_FEATURES = frozenset({"columnMapping", "timestampNtz"})


def _check_protocol(snapshot: Snapshot) -> None:
    unsupported = sorted(snapshot.reader_features - SUPPORTED_READER_FEATURES)
    if snapshot.min_reader_version > 3 or unsupported:
        raise TableError(
            f"Delta table {snapshot.table_uri} needs reader features "
            f"{', '.join(unsupported) or f'of protocol {snapshot.min_reader_version}'} "
            f"that this reader does not handle (it handles {', '.join(sorted(SUPPORTED_READER_FEATURES))}); "
            "rewrite the table without them (e.g. REORG TABLE ... APPLY (PURGE) for deletion vectors)"
        )


def open_snapshot(table_uri: str, days: Iterable[dt.date], *, version: int | None = None,
                  store: Store | None = None) -> Snapshot:  # fmt: skip
    """The table at ``table_uri`` pinned at ``version`` (default: latest), with the files of ``days``.

    A table whose protocol needs reader features other than ``SUPPORTED_READER_FEATURES`` is a
    :class:`TableError`.
    """
    snapshot = delta_snapshot.open_snapshot(table_uri, days, version=version, store=store)
    _check_protocol(snapshot)
    return snapshot
