"""Projected reads of a snapshot's files with pyarrow: only the requested columns' chunks, counted and coalesced.

Every file is opened through :class:`CountingFile`, which counts the bytes pyarrow
actually reads, the requests that fetched them and the files it opens, so the accounting
(and the tests) rely on what happened rather than on what the API promises. Columns a file
does not have (a feature added after the file was written) are filled with the registry default.

A row group's selected column chunks are fetched before pyarrow decodes them, in as few
requests as :class:`Coalescing` allows (Meta's storage co-design: chunks within a gap of 1 MiB
in one ranged read), and pyarrow reads them from memory. The files are local or on S3,
through the snapshot's :class:`schemas.storage.Store`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from ingest.snapshot import DataFile, Snapshot
from schemas.arrow import feature_type
from schemas.errors import TableError
from schemas.storage import Store
from schemas.registry import DatasetRegistry

_SUMMED = ("bytes_read", "requests", "bytes_wasted", "rows", "batches", "bytes_all_columns", "io_s", "read_s",
           "convert_s", "shuffle_s", "assemble_s", "wait_s")  # fmt: skip


@dataclass
class IoCounter:
    """What reading cost: bytes read and files opened (counted by the files themselves, thread-safe), rows and
    batches made, what all columns of those rows would have cost, and where the time went."""

    bytes_read: int = 0
    requests: int = 0  # reads made of the files: each one a ranged GET on S3
    bytes_wasted: int = 0  # of bytes_read, those between coalesced chunks that no column asked for
    files_opened: list[str] = field(default_factory=list)
    rows: int = 0
    batches: int = 0
    bytes_all_columns: int = 0
    io_s: float = 0.0  # inside the files' reads
    read_s: float = 0.0  # reading row groups: I/O plus Parquet decoding
    convert_s: float = 0.0  # transforms of whole row groups
    shuffle_s: float = 0.0  # concatenating a window's rows and drawing its permutation
    assemble_s: float = 0.0  # gathering each batch's rows into its tensors
    wait_s: float = 0.0  # the consumer waiting for batches (set by ResumableLoader)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __getstate__(self) -> dict:  # picklable for worker processes: the lock is recreated
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    @property
    def decode_s(self) -> float:
        return max(self.read_s - self.io_s, 0.0)

    def add(self, **amounts: float) -> None:
        """Add to summed fields under the lock: the read-ahead thread counts while the loader drains."""
        with self._lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def opened(self, uri: str) -> None:
        with self._lock:
            self.files_opened.append(uri)

    def merge(self, other: IoCounter) -> None:
        with self._lock:
            for name in _SUMMED:
                setattr(self, name, getattr(self, name) + getattr(other, name))
            self.files_opened.extend(other.files_opened)

    def drain(self) -> IoCounter:
        """What was counted since the last drain, forgotten here: a worker sends it along with each batch."""
        with self._lock:
            out = IoCounter(**{name: getattr(self, name) for name in _SUMMED}, files_opened=self.files_opened)
            for name in _SUMMED:
                setattr(self, name, type(getattr(self, name))())
            self.files_opened = []
        return out


class _ReadOnlyFile:
    """What pyarrow asks of a Python file object besides reading, seeking and its size."""

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False


class CountingFile(_ReadOnlyFile):
    """A read-only file object over a pyarrow input file that counts every byte read."""

    def __init__(self, raw: pa.NativeFile, counter: IoCounter) -> None:
        self._raw, self._counter = raw, counter
        self.closed = False

    def read(self, nbytes: int | None = None) -> bytes:
        started = time.perf_counter()
        data = self._raw.read(nbytes)
        self._counter.add(bytes_read=len(data), requests=1, io_s=time.perf_counter() - started)
        return data

    def read_buffer(self, nbytes: int | None = None) -> pa.Buffer:
        """What pyarrow reads through: a buffer, no copy into Python bytes (read() costs 8% more of a read)."""
        started = time.perf_counter()
        data = self._raw.read_buffer(nbytes)
        self._counter.add(bytes_read=data.size, requests=1, io_s=time.perf_counter() - started)
        return data

    def read_at(self, nbytes: int, offset: int) -> pa.Buffer:
        """``nbytes`` from ``offset`` in one request (one ranged GET on S3)."""
        started = time.perf_counter()
        self._raw.seek(offset)  # NativeFile.read_at gives bytes (a copy); read_buffer gives a buffer
        data = self._raw.read_buffer(nbytes)
        self._counter.add(bytes_read=data.size, requests=1, io_s=time.perf_counter() - started)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def size(self) -> int:
        return self._raw.size()

    def close(self) -> None:
        self._raw.close()
        self.closed = True


@contextmanager
def open_counted(uri: str, counter: IoCounter, store: Store | None = None) -> Iterator[CountingFile]:
    """Open ``uri`` for counted reading: through ``store`` (the snapshot's), else a local path or any URI pyarrow
    knows."""
    try:
        if store is not None:
            raw = store.filesystem().open_input_file(store.path(uri))
        else:
            filesystem, path = pafs.FileSystem.from_uri(uri if "://" in uri else f"file://{uri}")
            raw = filesystem.open_input_file(path)
    except (OSError, ValueError) as err:
        if store is not None and store.on_s3 and not isinstance(err, FileNotFoundError):  # the store, not the file
            raise store.unreachable(uri, err) from err
        raise TableError(f"cannot open data file {uri}: {err}; the Delta log lists it, so it was removed by hand "
                         "or the table is being vacuumed") from err  # fmt: skip
    counter.opened(uri)
    handle = CountingFile(raw, counter)
    try:
        yield handle
    finally:
        handle.close()


_MAGIC = b"PAR1"


def read_footer(handle: CountingFile, where: str) -> pq.FileMetaData:
    """A file's Parquet metadata, reading exactly its footer (pyarrow alone reads a 64 KiB tail).

    ``where`` names the file in errors.
    """
    size = handle.size()
    if size < 12:
        raise TableError(f"data file {where} is corrupt or truncated: {size} bytes, too short for Parquet")
    handle.seek(size - 8)
    tail = handle.read(8)
    length = int.from_bytes(tail[:4], "little")
    if tail[4:] != _MAGIC or length > size - 12:
        raise TableError(f"data file {where} is corrupt or truncated: no Parquet footer at its end")
    handle.seek(size - 8 - length)
    footer = handle.read(length)
    try:
        return pq.read_metadata(pa.BufferReader(_MAGIC + footer + tail))
    except (OSError, pa.ArrowInvalid) as err:
        raise TableError(f"data file {where} is corrupt or truncated: its Parquet footer does not parse: {err}") from err


def file_footer(file: DataFile, counter: IoCounter, store: Store | None = None) -> pq.FileMetaData:
    """A data file's Parquet metadata, read once (two requests: its last 8 bytes, then the footer they announce)."""
    with open_counted(file.uri, counter, store) as handle:
        return read_footer(handle, f"{file.uri} (ds={file.ds})")


def row_group_sizes(metadata: pq.FileMetaData) -> tuple[tuple[int, int], ...]:
    """(rows, compressed bytes of all columns) of each row group of a data file, from its footer."""
    groups = (metadata.row_group(g) for g in range(metadata.num_row_groups))
    return tuple(
        (group.num_rows, sum(group.column(c).total_compressed_size for c in range(group.num_columns)))
        for group in groups
    )


@dataclass(frozen=True)
class Coalescing:
    """How a row group's selected column chunks are fetched: chunks at most ``gap`` bytes apart share one ranged
    request (Meta's storage co-design: 1 MiB), while the bytes no column asked for stay within ``max_waste`` of
    the bytes asked for, in each request. ``gap=None``: one request per column chunk (no coalescing).

    The waste rule is what keeps a wide gap honest when the chosen features are scattered (registry order): a
    merge over an unselected column larger than a tenth of what the request holds is not made.
    """

    gap: int | None = 1 << 20
    max_waste: float = 0.1

    def ranges(self, chunks: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
        """The requests for ``chunks`` ((offset, length) pairs): (offset, length, wasted bytes), in file order."""
        out: list[list[int]] = []
        for offset, length in sorted(chunks):
            if out and self.gap is not None:
                start, size, waste = out[-1]
                hole = offset - (start + size)
                if 0 <= hole <= self.gap and waste + hole <= self.max_waste * (size - waste + length):
                    out[-1] = [start, offset + length - start, waste + hole]
                    continue
            out.append([offset, length, 0])
        return [(start, size, waste) for start, size, waste in out]


def chunk_ranges(metadata: pq.FileMetaData, row_group: int, physical: Sequence[str]) -> list[tuple[int, int]]:
    """(offset, length) of the column chunks of ``physical`` columns (every leaf of each) in a row group."""
    group, wanted = metadata.row_group(row_group), set(physical)
    out = []
    for c in range(group.num_columns):
        chunk = group.column(c)
        if chunk.path_in_schema.split(".")[0] in wanted:
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                start = chunk.dictionary_page_offset
            out.append((start, chunk.total_compressed_size))
    return out


class FetchedRanges(_ReadOnlyFile):
    """A file's byte ranges fetched ahead (each in one request), served to pyarrow from memory.

    pyarrow reads a column chunk whole, from where the footer says it starts; a read outside what was
    fetched (it should not happen) goes to the file, counted as a request of its own.
    """

    def __init__(self, handle: CountingFile, requests: Sequence[tuple[int, int, int]], counter: IoCounter) -> None:
        self._handle, self._position = handle, 0
        self._fetched = [(start, handle.read_at(size, start)) for start, size, _waste in requests]
        counter.add(bytes_wasted=sum(waste for _s, _n, waste in requests))
        self.closed = False

    def read_buffer(self, nbytes: int | None = None) -> pa.Buffer:
        nbytes = self.size() - self._position if nbytes is None else nbytes
        for start, buffer in self._fetched:
            if start <= self._position and self._position + nbytes <= start + buffer.size:
                data = buffer.slice(self._position - start, nbytes)
                break
        else:
            data = self._handle.read_at(nbytes, self._position)
        self._position += data.size
        return data

    def read(self, nbytes: int | None = None) -> bytes:
        return self.read_buffer(nbytes).to_pybytes()

    def seek(self, offset: int, whence: int = 0) -> int:
        self._position = {0: 0, 1: self._position, 2: self.size()}[whence] + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def size(self) -> int:
        return self._handle.size()

    def close(self) -> None:
        self.closed = True


def read_row_groups(
    file: DataFile,
    snapshot: Snapshot,
    registry: DatasetRegistry,
    columns: Sequence[str],
    counter: IoCounter,
    *,
    row_groups: Sequence[int] | None = None,
) -> pa.Table:
    """The ``columns`` (logical names: features, labels, keys) of a data file's ``row_groups`` (default: all),
    read by projection, in row-group order.

    A feature the file lacks is filled with its registry default; any other missing
    column is an error. A corrupt or truncated file is a :class:`TableError` naming it.
    """
    with _projected(file, snapshot, registry, columns, counter) as (parquet, physical, decoded):
        groups = range(parquet.num_row_groups) if row_groups is None else row_groups
        table = parquet.read_row_groups(list(groups), columns=physical, use_threads=False)
        return decoded(table)


def read_chunks(
    file: DataFile,
    snapshot: Snapshot,
    registry: DatasetRegistry,
    columns: Sequence[str],
    counter: IoCounter,
    *,
    row_group: int,
    chunk_rows: int,
    metadata: pq.FileMetaData | None = None,
    coalescing: Coalescing = Coalescing(),
) -> Iterator[pa.Table]:
    """The ``columns`` of one row group, ``chunk_rows`` rows at a time (the last chunk shorter), as
    :func:`read_row_groups` gives them: the first rows can be used before the rest is decoded.

    The row group's selected column chunks are fetched first, in the requests ``coalescing`` makes;
    ``metadata`` is the file's footer when the caller has it (else it is read).
    """
    with _projected(file, snapshot, registry, columns, counter, metadata=metadata, row_group=row_group,
                    coalescing=coalescing) as (parquet, physical, decoded):  # fmt: skip
        batches = parquet.iter_batches(batch_size=chunk_rows, row_groups=[row_group], columns=physical,
                                       use_threads=False)  # fmt: skip
        for batch in batches:
            yield decoded(pa.Table.from_batches([batch]))


@contextmanager
def _projected(
    file: DataFile, snapshot: Snapshot, registry: DatasetRegistry, columns: Sequence[str], counter: IoCounter, *,
    metadata: pq.FileMetaData | None = None, row_group: int | None = None, coalescing: Coalescing | None = None,
) -> Iterator[tuple]:  # fmt: skip
    """A data file open for reading ``columns``: its ParquetFile, the physical names of the columns it has,
    and a function from what it decodes to the logical table (registry defaults filled in). With a
    ``row_group`` and ``coalescing``, that row group's chunks of those columns are fetched ahead."""
    where = f"{file.uri} (ds={file.ds})"
    with open_counted(file.uri, counter, snapshot.store) as handle:
        try:
            metadata = metadata or read_footer(handle, where)
            present = set(metadata.schema.to_arrow_schema().names)
            found = [c for c in columns if snapshot.physical.get(c) in present]
            physical = [snapshot.physical[c] for c in found]
            source: CountingFile | FetchedRanges = handle
            if row_group is not None and coalescing is not None:
                requests = coalescing.ranges(chunk_ranges(metadata, row_group, physical))
                source = _fetched(handle, requests, counter, snapshot.store, file.uri)
            parquet = pq.ParquetFile(source, metadata=metadata, pre_buffer=False)
            logical = dict(zip(physical, found, strict=True))
            yield parquet, physical, lambda table: _logical(table, logical, columns, registry, where)
        except (OSError, pa.ArrowInvalid) as err:
            raise TableError(f"data file {where} is corrupt or truncated: {err}") from err


def _fetched(handle: CountingFile, requests: Sequence[tuple[int, int, int]], counter: IoCounter, store: Store | None,
             uri: str) -> FetchedRanges:  # fmt: skip
    """The requests fetched; a store that stops answering is named as such, not as a corrupt file."""
    try:
        return FetchedRanges(handle, requests, counter)
    except OSError as err:
        if store is not None and store.on_s3:
            raise store.unreachable(uri, err) from err
        raise


def _nested_names(column: pa.ChunkedArray, expected: pa.DataType, name: str, where: str) -> pa.ChunkedArray:
    """A weighted sparse column under the registry's field names: column mapping names a struct's fields too
    (``list<struct<col-..., col-...>>`` in the files), so they are renamed by a zero-copy view."""
    if column.type == expected or not pa.types.is_list(column.type) or not pa.types.is_struct(column.type.value_type):
        return column
    try:
        return pa.chunked_array([chunk.view(expected) for chunk in column.chunks], type=expected)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
        raise TableError(f"data file {where}: column {name!r} is {column.type} in the file, not the registry's "
                         f"{expected}; check the registry's kind and dtype for it ({err})") from err  # fmt: skip


def _logical(table: pa.Table, logical: dict[str, str], columns: Sequence[str], registry: DatasetRegistry,
             where: str) -> pa.Table:  # fmt: skip
    """``table`` (physical names, file order) as ``columns``: renamed, reordered, missing features at their default."""
    table = table.rename_columns([logical[name] for name in table.column_names])
    found, out = set(logical.values()), []
    for name in columns:
        feature = registry.by_name.get(name)
        if name in found:
            column = table.column(name)
            out.append(column if feature is None else _nested_names(column, feature_type(feature), name, where))
            continue
        if feature is None:
            raise TableError(f"data file {where} has no column {name!r} and it is not a feature")
        out.append(pa.repeat(pa.scalar(feature.fill_value, type=feature_type(feature)), table.num_rows))
    return pa.table(out, names=list(columns))
