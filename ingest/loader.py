"""The reader as a torch IterableDataset: rank- and worker-split, window-shuffled, resumable.

    dataset = SnapshotDataset(snapshot, registry, columns, batch_size=4096, shuffle_buffer=65536, seed=7,
                              rank=rank, world_size=world_size)
    loader = ResumableLoader(dataset, num_workers=4)
    for batch in loader: ...                     # pyarrow tables of `columns` (or what `convert` makes of them)
    state = loader.state_dict()                  # resume later: loader.load_state_dict(state)

How rows are split is in ``ingest/plan.py``: every rank yields the same number of
batches, every row is read once per epoch across ranks (``drop_last`` drops the
remainder instead). Memory holds, without worker processes, one window of ``shuffle_buffer`` rows,
``1 + READ_AHEAD`` chunks of at most ``CHUNK_ROWS`` rows (the one being converted and those a thread reads
ahead) and ``PREFETCH`` batches made ahead; with them, per worker process, one window, one chunk and a
window's batches in flight.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from ingest.memory import tune_malloc
from ingest.plan import (
    Piece,
    Unit,
    Window,
    batches_per_window,
    rank_windows,
    resume_roles,
    window_permutation,
    worker_windows,
)
from ingest.projected_reads import Coalescing, IoCounter, file_footer, read_chunks, row_group_sizes
from ingest.snapshot import Snapshot
from schemas.config import NON_NEGATIVE_INT, POSITIVE_INT, satisfies
from schemas.errors import ConfigError, TableError
from schemas.registry import DatasetRegistry

CHUNK_ROWS = 16_384  # about how many rows of a row group are read and converted at a time
READ_AHEAD = 3  # chunks read ahead of the one being converted
PREFETCH = 2  # batches made ahead of the caller by a thread, when there are no worker processes


def chunk_rows(unit: Unit) -> int:
    """The rows of each chunk of a row group (the last may have fewer): equal chunks of at most CHUNK_ROWS, so
    the first batch waits for one chunk rather than a whole row group, and no chunk is a small remainder."""
    return -(-unit.rows // -(-unit.rows // CHUNK_ROWS)) if unit.rows else 1


def _chunk_slices(piece: Piece) -> Iterator[tuple[int, int, int]]:
    """(chunk, start, stop within the chunk) of the chunks of its row group that a piece's rows lie in."""
    size = chunk_rows(piece.unit)
    for chunk in range(piece.start // size, -(-piece.stop // size)):
        base = chunk * size
        yield chunk, max(piece.start, base) - base, min(piece.stop, base + size) - base


class TableBlock:
    """A pyarrow table as a block (see SnapshotDataset): what the loader uses without a converter."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def __len__(self) -> int:
        return self.table.num_rows

    def slice(self, start: int, stop: int) -> TableBlock:
        return TableBlock(self.table.slice(start, stop - start))

    @staticmethod
    def concat(parts: Sequence[TableBlock]) -> TableBlock:
        return parts[0] if len(parts) == 1 else TableBlock(pa.concat_tables([p.table for p in parts]))

    def batch(self, rows: np.ndarray | None = None) -> pa.Table:
        return self.table if rows is None else self.table.take(pa.array(rows))


class SnapshotDataset(torch.utils.data.IterableDataset):
    """Batches of a snapshot's rows: pyarrow tables of ``columns``, or what ``convert``'s blocks make of them.

    ``convert`` turns each row group read (a pyarrow table of ``columns``) into a block
    with ``len()``, ``slice(start, stop)``, ``concat(parts)`` and ``batch(rows=None)``, such as
    :class:`ingest.block.Block`; a batch is ``window.batch(rows)`` with its rows of the window's permutation.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        registry: DatasetRegistry,
        columns: Sequence[str],
        *,
        batch_size: int,
        shuffle_buffer: int = 0,
        seed: int = 0,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
        convert: Callable[[pa.Table], Any] = TableBlock,
        coalescing: Coalescing = Coalescing(),
    ) -> None:
        if not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} is not in [0, world_size {world_size}); pass the process's own rank")
        if not (satisfies(batch_size, POSITIVE_INT) and satisfies(shuffle_buffer, NON_NEGATIVE_INT)):
            raise ConfigError(f"batch_size {batch_size} must be > 0 and shuffle_buffer {shuffle_buffer} >= 0")
        super().__init__()
        self.snapshot, self.registry, self.columns = snapshot, registry, tuple(columns)
        self.batch_size, self.shuffle_buffer, self.seed, self.drop_last = batch_size, shuffle_buffer, seed, drop_last
        self.rank, self.world_size, self.convert, self.coalescing = rank, world_size, convert, coalescing
        footers = IoCounter()
        #: every file's footer, read once here to plan; workers get them with the dataset and read none again
        self.footers = [file_footer(file, footers, snapshot.store) for file in snapshot.files]
        self.units = [
            Unit(index, group, rows, size)
            for index, metadata in enumerate(self.footers)
            for group, (rows, size) in enumerate(row_group_sizes(metadata))
        ]
        self.footer_bytes, self.footer_requests = footers.bytes_read, footers.requests  # each worker counts its own
        self.epoch = 0
        self.last_counter = IoCounter()
        self.start_batch = 0  # batches of this epoch already delivered (set by ResumableLoader on resume)
        self.with_costs = False  # yield (batch, IoCounter of what it cost) pairs (set by ResumableLoader)

    def windows(self, epoch: int | None = None) -> list:
        """This rank's windows of ``epoch`` (default: the current one)."""
        return rank_windows(
            self.units, rank=self.rank, world_size=self.world_size, batch_size=self.batch_size,
            shuffle_buffer=self.shuffle_buffer, drop_last=self.drop_last, seed=self.seed,
            epoch=self.epoch if epoch is None else epoch,
        )  # fmt: skip

    def __len__(self) -> int:
        """Batches per epoch on this rank (the same on every rank)."""
        return sum(len(w.batch_sizes) for w in self.windows())

    def _tables(self, keys: Sequence[tuple[Unit, int]], counter: IoCounter) -> Iterator[pa.Table]:
        """The chunks ``keys`` names, in order: advanced on the read-ahead thread, one chunk a call."""
        for unit, group in itertools.groupby(keys, key=lambda key: key[0]):
            wanted = [chunk for _unit, chunk in group]
            file = self.snapshot.files[unit.file]
            size = chunk_rows(unit)
            chunks = read_chunks(file, self.snapshot, self.registry, self.columns, counter, row_group=unit.row_group,
                                 chunk_rows=size, metadata=self.footers[unit.file], coalescing=self.coalescing)  # fmt: skip
            for chunk, table in enumerate(chunks):  # a row group decodes from its start: earlier chunks pass by
                expected = min(size, unit.rows - chunk * size)
                if table.num_rows != expected:
                    raise TableError(f"data file {file.uri} (ds={file.ds}) row group {unit.row_group} gave "
                                     f"{table.num_rows} rows at chunk {chunk}, its footer says {expected}")  # fmt: skip
                if chunk in wanted:
                    yield table
                if chunk == wanted[-1]:
                    break
            chunks.close()  # the file too

    @staticmethod
    def _next(tables: Iterator[pa.Table], counter: IoCounter) -> pa.Table:
        started = time.perf_counter()
        table = next(tables, None)
        counter.add(read_s=time.perf_counter() - started)  # on the read-ahead thread: under the counter's lock
        if table is None:
            raise TableError("a data file has fewer rows than its footer says; was it rewritten in place?")
        return table

    def _blocks(self, windows: Sequence, counter: IoCounter) -> Iterator[tuple[tuple[Unit, int], Any]]:
        """The chunks the windows need, in order, each once: read by a thread ahead (pyarrow decodes without the
        GIL) and converted in this one, so reading overlaps transforms and batching; in a DataLoader worker
        process, read and converted in turn (the workers overlap each other)."""
        keys = [(piece.unit, chunk) for w in windows for piece in w.pieces for chunk, _lo, _hi in _chunk_slices(piece)]
        keys = [key for key, _ in itertools.groupby(keys)]
        tables = self._tables(keys, counter)
        if torch.utils.data.get_worker_info() is not None:  # a worker process: the other workers are the overlap,
            try:  # and a thread of its own would only add to the threads competing for the cores
                for key in keys:
                    yield self._converted(key, self._next(tables, counter), counter)
            finally:
                tables.close()
            return
        try:
            with ThreadPoolExecutor(1, thread_name_prefix="featurehouse-read") as pool:
                pending: deque = deque()
                for key in keys:
                    pending.append((key, pool.submit(self._next, tables, counter)))
                    if len(pending) > READ_AHEAD:
                        key, read = pending.popleft()
                        yield self._converted(key, read.result(), counter)
                while pending:
                    key, read = pending.popleft()
                    yield self._converted(key, read.result(), counter)
        finally:
            tables.close()  # after the pool has stopped: no thread is inside it

    def _converted(self, key: tuple[Unit, int], table: pa.Table, counter: IoCounter) -> tuple[tuple[Unit, int], Any]:
        started = time.perf_counter()
        block = self.convert(table)
        counter.convert_s += time.perf_counter() - started
        return key, block

    def __iter__(self) -> Iterator[Any]:
        return self.batches(self.epoch, self.start_batch)

    def batches(self, epoch: int, start_batch: int) -> Iterator[Any]:
        """The batches of ``epoch`` after the first ``start_batch`` (this worker's share when in a worker)."""
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        windows = self.windows(epoch)
        role = resume_roles(windows, num_workers=workers, delivered=start_batch).get(worker)
        if role is None:  # nothing left for this worker in this epoch
            return
        original, skip = role
        yield from self.window_batches(worker_windows(windows, worker=original, num_workers=workers), epoch=epoch,
                                       skip=skip)  # fmt: skip

    def window_batches(self, windows: Sequence[Window], *, epoch: int, skip: int = 0) -> Iterator[Any]:
        """The batches of consecutive ``windows`` of this rank's ``epoch``, after the first ``skip``: what one
        worker, a DataLoader process or a preprocessing-service actor, makes of its share."""
        tune_malloc()  # see ingest/memory.py: 1.13x faster end to end
        counter = self.last_counter = IoCounter()  # in this process: the caller sees it when num_workers is 0
        todo = []
        for window in windows:
            if skip >= len(window.batch_sizes):  # delivered before a resume: not even read
                skip -= len(window.batch_sizes)
            else:
                todo.append(window)
        blocks = self._blocks(todo, counter)
        key = block = None
        for window in todo:
            parts = []
            for piece in window.pieces:
                for chunk, start, stop in _chunk_slices(piece):
                    if (piece.unit, chunk) != key:
                        key, block = next(blocks)
                    parts.append(block.slice(start, stop))
            yield from self._batches(window, parts, skip, counter, epoch)
            skip = 0

    def _batches(self, window, parts: list, skip: int, counter: IoCounter, epoch: int) -> Iterator[Any]:
        """The window's batches (after the first ``skip``): its rows shuffled together, gathered batch by batch."""
        started = time.perf_counter()
        rows = type(parts[0]).concat(parts)
        order = None
        if self.shuffle_buffer > 0:
            order = window_permutation(len(rows), seed=self.seed, epoch=epoch, rank=self.rank,
                                       window=window.index, shuffle=True)  # fmt: skip
        counter.shuffle_s += time.perf_counter() - started
        counter.bytes_all_columns += sum(
            p.unit.bytes_all * (p.stop - p.start) // max(p.unit.rows, 1) for p in window.pieces
        )
        offset = 0
        for i, size in enumerate(window.batch_sizes):
            if i >= skip:
                started = time.perf_counter()
                if order is None:
                    out = rows.slice(offset, offset + size).batch()
                else:
                    out = rows.batch(order[offset : offset + size])
                counter.assemble_s += time.perf_counter() - started
                counter.rows += size
                counter.batches += 1
                yield (out, counter.drain()) if self.with_costs else out
            offset += size


class _OneEpoch(torch.utils.data.IterableDataset):
    """An epoch of a dataset from a given batch, for a DataLoader in the batching thread."""

    def __init__(self, dataset: SnapshotDataset, epoch: int, start_batch: int) -> None:
        super().__init__()
        self.dataset, self.epoch, self.start_batch = dataset, epoch, start_batch

    def __iter__(self) -> Iterator[Any]:
        return self.dataset.batches(self.epoch, self.start_batch)


def _epoch_items(dataset: SnapshotDataset, loader_args: dict[str, Any], epoch: int, start: int) -> Iterator[Any]:
    return iter(torch.utils.data.DataLoader(_OneEpoch(dataset, epoch, start), batch_size=None, num_workers=0,
                                            **loader_args))  # fmt: skip


class _Producer:
    """A thread making a loader's items from ``(epoch, start)`` on, at most ``depth`` ahead of the caller, and on
    into the following epochs (below ``until``), so a new epoch's first batch is ready when it is asked for.

    ``position`` is the (epoch, batch) of the next item the caller gets; its errors are raised in the caller.
    """

    def __init__(self, items: Callable[[int, int], Iterator[Any]], *, epoch: int, start: int, depth: int,
                 until: int | None) -> None:  # fmt: skip
        self.position, self.until = (epoch, start), until
        self._made: queue.Queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(items, epoch, start), name="featurehouse-batches",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def usable_at(self, position: tuple[int, int]) -> bool:
        return self.position == position and (self.until is None or position[0] < self.until)

    def _put(self, entry: tuple[str, Any]) -> bool:
        while not self._stop.is_set():
            try:
                self._made.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, items: Callable[[int, int], Iterator[Any]], epoch: int, start: int) -> None:
        try:
            while self.until is None or epoch < self.until:
                for item in items(epoch, start):
                    if not self._put(("item", item)):
                        return
                if not self._put(("end", None)):
                    return
                epoch, start = epoch + 1, 0
        except BaseException as err:  # noqa: BLE001  # handed to the caller, raised there
            self._put(("error", err))

    def epoch(self) -> Iterator[Any]:
        """The current epoch's items from ``position`` on."""
        while True:
            kind, value = self._made.get()
            if kind == "error":
                self.position = (-1, -1)  # never used again
                raise value
            epoch, batch = self.position
            self.position = (epoch + 1, 0) if kind == "end" else (epoch, batch + 1)
            if kind == "end":
                return
            yield value

    def stop(self) -> None:
        """Stop after the item being made (the thread may be in the middle of one)."""
        self._stop.set()
        self._thread.join()


class ResumableLoader:
    """A DataLoader over a :class:`SnapshotDataset` that knows how far an epoch got and can resume there.

    Without worker processes, a thread of this process makes the batches, up to ``prefetch``
    ahead of the caller, so a training step overlaps the next batch's transforms and gathering
    as worker processes would, and it goes on into the next epoch (up to ``epochs``, when given)
    so that epoch's first window is read while the last batches of this one train. ``prefetch=0``:
    the caller's thread makes each batch when asked. With worker processes, each has up to DataLoader's
    ``prefetch_factor`` batches in flight: by default a window's batches (``plan.batches_per_window``, at
    least 2), so a worker can make a whole window while another's batches are being taken.

    ``counter`` adds up what every delivered batch cost in whichever process made it (workers
    send their counts with each batch), the footers read to plan the epoch, and ``wait_s``: the
    time the caller waited for batches. ``close()`` stops the batching thread (so does dropping
    the loader).
    """

    def __init__(self, dataset: SnapshotDataset, *, num_workers: int = 0, prefetch: int = PREFETCH,
                 epochs: int | None = None, **loader_args: Any) -> None:  # fmt: skip
        if not satisfies(prefetch, NON_NEGATIVE_INT):
            raise ConfigError(f"prefetch {prefetch} must be >= 0 (batches made ahead; 0 makes them when asked)")
        if num_workers > 0:  # a worker makes a window's batches in one burst: with DataLoader's default of 2 in
            # flight per worker, a worker that is ahead waits until the trainer takes its batches, while the one
            # whose turn it is reads; bench/reader.py, 2 workers, 1M rows: 1.49 s at 2, 1.16 s at 4 (a window)
            loader_args.setdefault("prefetch_factor", max(2, batches_per_window(batch_size=dataset.batch_size,
                                                                               shuffle_buffer=dataset.shuffle_buffer)))
        self.dataset, self.num_workers, self.loader_args = dataset, num_workers, loader_args
        self.prefetch = prefetch if num_workers == 0 else 0  # worker processes make batches ahead already
        self.epochs = epochs
        self.delivered = 0
        # the footers read to plan count too
        self.counter = IoCounter(bytes_read=dataset.footer_bytes, requests=dataset.footer_requests)
        self._producer: _Producer | None = None
        self._stop_producer = weakref.finalize(self, lambda: None)
        dataset.with_costs = True

    def _made_ahead(self) -> Iterator[Any]:
        position = (self.dataset.epoch, self.delivered)
        if self._producer is None or not self._producer.usable_at(position):
            self.close()
            until = self.epochs if self.epochs is not None and position[0] < self.epochs else None
            items = partial(_epoch_items, self.dataset, self.loader_args)  # not self: the thread must not keep it
            self._producer = _Producer(items, epoch=position[0], start=position[1], depth=self.prefetch, until=until)
            self._stop_producer = weakref.finalize(self, self._producer.stop)
        return self._producer.epoch()

    def close(self) -> None:
        """Stop the batching thread, if one runs."""
        self._stop_producer()
        self._producer = None

    def __iter__(self) -> Iterator[Any]:
        if self.prefetch:
            loader = self._made_ahead()
        else:
            self.dataset.start_batch = self.delivered
            loader = iter(torch.utils.data.DataLoader(
                self.dataset, batch_size=None, num_workers=self.num_workers, **self.loader_args
            ))  # fmt: skip
        while True:
            started = time.perf_counter()
            try:
                batch, cost = next(loader)
            except StopIteration:
                break
            self.counter.wait_s += time.perf_counter() - started
            self.counter.merge(cost)
            self.delivered += 1
            yield batch
        self.dataset.epoch += 1
        self.delivered = 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.dataset.epoch, "delivered": self.delivered,
                "plan": plan_key(self.dataset, num_workers=self.num_workers)}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_plan(state, self.dataset, num_workers=self.num_workers)
        self.dataset.epoch, self.delivered = int(state["epoch"]), int(state["delivered"])


def plan_key(dataset: SnapshotDataset, *, num_workers: int = 0) -> dict[str, Any]:
    """What a loader's position depends on: a saved position means the same batches only under the same plan."""
    return {
        "table_version": dataset.snapshot.version, "files": len(dataset.snapshot.files), "rank": dataset.rank,
        "world_size": dataset.world_size, "num_workers": num_workers, "batch_size": dataset.batch_size,
        "shuffle_buffer": dataset.shuffle_buffer, "seed": dataset.seed, "drop_last": dataset.drop_last,
    }  # fmt: skip


def check_plan(state: dict[str, Any], dataset: SnapshotDataset, *, num_workers: int = 0) -> None:
    """Refuse a saved loader state made under another plan, naming both."""
    if state.get("plan") != plan_key(dataset, num_workers=num_workers):
        raise ConfigError(
            f"cannot resume: the saved state was made for {state.get('plan')}, this loader is "
            f"{plan_key(dataset, num_workers=num_workers)}; resume with the same snapshot version, files, rank, "
            "world size, workers, batch size, buffer and seed (the preprocessing service delivers in the order of "
            "0 workers)"
        )
