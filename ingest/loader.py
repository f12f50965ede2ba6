"""The reader as a torch IterableDataset: rank- and worker-split, window-shuffled, resumable.

    dataset = SnapshotDataset(snapshot, registry, columns, batch_size=4096, shuffle_buffer=65536, seed=7,
                              rank=rank, world_size=world_size)
    loader = ResumableLoader(dataset, num_workers=4)
    for batch in loader: ...                     # pyarrow tables of `columns` (or what `convert` makes of them)
    state = loader.state_dict()                  # resume later: loader.load_state_dict(state)

How rows are split is in ``ingest/plan.py``: every rank yields the same number of
batches, every row is read once per epoch across ranks (``drop_last`` drops the
remainder instead), memory holds one window of ``shuffle_buffer`` rows and two row groups per worker
(the one being batched and the one a thread reads ahead).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from ingest.plan import Unit, rank_windows, resume_roles, window_permutation, worker_windows
from ingest.read import IoCounter, read_row_groups, row_group_sizes
from ingest.snapshot import Snapshot
from schemas.errors import ConfigError
from schemas.registry import DatasetRegistry


READ_AHEAD = 1  # row groups read ahead of the one being converted


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
    ) -> None:
        if not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} is not in [0, world_size {world_size}); pass the process's own rank")
        if batch_size <= 0 or shuffle_buffer < 0:
            raise ConfigError(f"batch_size {batch_size} must be > 0 and shuffle_buffer {shuffle_buffer} >= 0")
        super().__init__()
        self.snapshot, self.registry, self.columns = snapshot, registry, tuple(columns)
        self.batch_size, self.shuffle_buffer, self.seed, self.drop_last = batch_size, shuffle_buffer, seed, drop_last
        self.rank, self.world_size, self.convert = rank, world_size, convert
        footers = IoCounter()
        self.units = [
            Unit(index, group, rows, size)
            for index, file in enumerate(snapshot.files)
            for group, (rows, size) in enumerate(row_group_sizes(file, footers))
        ]
        self.footer_bytes = footers.bytes_read  # read in this process to plan; each worker counts its own reads
        self.epoch = 0
        self.last_counter = IoCounter()
        self.start_batch = 0  # batches of this epoch already delivered (set by ResumableLoader on resume)
        self.with_costs = False  # yield (batch, IoCounter of what it cost) pairs (set by ResumableLoader)

    def windows(self) -> list:
        return rank_windows(
            self.units, rank=self.rank, world_size=self.world_size, batch_size=self.batch_size,
            shuffle_buffer=self.shuffle_buffer, drop_last=self.drop_last, seed=self.seed, epoch=self.epoch,
        )  # fmt: skip

    def __len__(self) -> int:
        """Batches per epoch on this rank (the same on every rank)."""
        return sum(len(w.batch_sizes) for w in self.windows())

    def _read(self, unit: Unit, counter: IoCounter) -> pa.Table:
        started = time.perf_counter()
        file = self.snapshot.files[unit.file]
        table = read_row_groups(file, self.snapshot, self.registry, self.columns, counter,
                                row_groups=[unit.row_group])  # fmt: skip
        counter.add(read_s=time.perf_counter() - started)  # on the read-ahead thread: under the counter's lock
        return table

    def _blocks(self, windows: Sequence, counter: IoCounter) -> Iterator[tuple[Unit, Any]]:
        """The row groups the windows need, in order, each once: read by a thread one row group ahead (pyarrow
        decodes without the GIL) and converted in this one, so reading overlaps transforms and batching."""
        units = [unit for unit, _ in itertools.groupby(p.unit for w in windows for p in w.pieces)]
        with ThreadPoolExecutor(1, thread_name_prefix="featurehouse-read") as pool:
            pending: deque = deque()
            for unit in units:
                pending.append((unit, pool.submit(self._read, unit, counter)))
                if len(pending) > READ_AHEAD:
                    yield self._converted(*pending.popleft(), counter)
            while pending:
                yield self._converted(*pending.popleft(), counter)

    def _converted(self, unit: Unit, table: Future, counter: IoCounter) -> tuple[Unit, Any]:
        rows = table.result()
        started = time.perf_counter()
        block = self.convert(rows)
        counter.convert_s += time.perf_counter() - started
        return unit, block

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        windows = self.windows()
        role = resume_roles(windows, num_workers=workers, delivered=self.start_batch).get(worker)
        if role is None:  # nothing left for this worker in this epoch
            return
        original, skip = role
        counter = self.last_counter = IoCounter()  # in this process: the caller sees it when num_workers is 0
        todo = []
        for window in worker_windows(windows, worker=original, num_workers=workers):
            if skip >= len(window.batch_sizes):  # delivered before a resume: not even read
                skip -= len(window.batch_sizes)
            else:
                todo.append(window)
        blocks = self._blocks(todo, counter)
        unit = block = None
        for window in todo:
            parts = []
            for piece in window.pieces:
                if piece.unit != unit:
                    unit, block = next(blocks)
                parts.append(block.slice(piece.start, piece.stop))
            yield from self._batches(window, parts, skip, counter)
            skip = 0

    def _batches(self, window, parts: list, skip: int, counter: IoCounter) -> Iterator[Any]:
        """The window's batches (after the first ``skip``): its rows shuffled together, gathered batch by batch."""
        started = time.perf_counter()
        rows = type(parts[0]).concat(parts)
        order = None
        if self.shuffle_buffer > 0:
            order = window_permutation(len(rows), seed=self.seed, epoch=self.epoch, rank=self.rank,
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


class ResumableLoader:
    """A DataLoader over a :class:`SnapshotDataset` that knows how far an epoch got and can resume there.

    ``counter`` adds up what every batch cost in whichever process made it (workers send
    their counts with each batch), the footers read to plan the epoch, and ``wait_s``: the
    time this process waited for batches.
    """

    def __init__(self, dataset: SnapshotDataset, *, num_workers: int = 0, **loader_args: Any) -> None:
        self.dataset, self.num_workers, self.loader_args = dataset, num_workers, loader_args
        self.delivered = 0
        self.counter = IoCounter(bytes_read=dataset.footer_bytes)  # the footers read to plan count too
        dataset.with_costs = True

    def __iter__(self) -> Iterator[Any]:
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

    def _plan_key(self) -> dict[str, Any]:
        d = self.dataset
        return {
            "table_version": d.snapshot.version, "files": len(d.snapshot.files), "rank": d.rank,
            "world_size": d.world_size, "num_workers": self.num_workers, "batch_size": d.batch_size,
            "shuffle_buffer": d.shuffle_buffer, "seed": d.seed, "drop_last": d.drop_last,
        }  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.dataset.epoch, "delivered": self.delivered, "plan": self._plan_key()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("plan") != self._plan_key():
            raise ConfigError(
                f"cannot resume: the saved state was made for {state.get('plan')}, this loader is {self._plan_key()}; "
                "resume with the same snapshot version, files, rank, world size, workers, batch size, buffer and seed"
            )
        self.dataset.epoch, self.delivered = int(state["epoch"]), int(state["delivered"])
