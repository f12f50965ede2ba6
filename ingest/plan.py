"""Who reads which rows: the epoch's split of a snapshot over ranks, batches, windows and workers.

Pure arithmetic on row counts (no data is read), identical in every rank and worker::

    units (row groups, in ds/file/row-group order)  --(epoch shuffle of units)-->  one stream of N rows
    stream: | rank 0: rows [0, N/R)          | rank 1: rows [N/R, 2N/R) | ...      (shares differ by <= 1 row)
    rank's share -> the same number of batches on every rank (sizes differ by <= 1; drop_last: exactly B)
    batches -> windows of m = max(1, shuffle_buffer // B) consecutive batches; a window's rows are
               shuffled together (the bounded shuffle buffer)
    windows -> workers in contiguous blocks: worker w reads windows [w*n/W, (w+1)*n/W)

DataLoader takes one batch from each worker in turn, so the global order of a
rank's batches is known in advance, and resuming after ``k`` batches means each
worker skips the batches it had already delivered, without reading them (the
workers are renumbered so that a fresh DataLoader's round robin continues it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schemas.errors import ConfigError


@dataclass(frozen=True)
class Unit:
    """A row group of a data file: the smallest thing read."""

    file: int  # index into the snapshot's files
    row_group: int
    rows: int
    bytes_all: int = 0  # compressed bytes of all its columns (what reading every column would cost)


@dataclass(frozen=True)
class Piece:
    """Rows ``[start, stop)`` of a unit."""

    unit: Unit
    start: int
    stop: int


@dataclass(frozen=True)
class Window:
    """Consecutive batches of one rank whose rows are shuffled together."""

    index: int
    pieces: tuple[Piece, ...]
    batch_sizes: tuple[int, ...]
    first_batch: int  # the rank-local index of its first batch


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([abs(k) for k in key])


def epoch_units(units: list[Unit], *, seed: int, epoch: int, shuffle: bool) -> list[Unit]:
    """The epoch's order of units: shuffled identically on every rank, or as given."""
    if not shuffle:
        return list(units)
    order = _rng(seed, epoch, 1).permutation(len(units))
    return [units[i] for i in order]


def batches_per_rank(total: int, *, world_size: int, batch_size: int, drop_last: bool) -> int:
    """How many batches every rank yields in an epoch of ``total`` rows (the same on every rank)."""
    shares = [total * (r + 1) // world_size - total * r // world_size for r in range(world_size)]
    if drop_last:
        return min(shares) // batch_size
    return -(-max(shares) // batch_size)


def _pieces(units: list[Unit], start: int, stop: int) -> list[Piece]:
    """The pieces of the concatenated ``units`` covering stream rows ``[start, stop)``."""
    out, offset = [], 0
    for unit in units:
        lo, hi = max(start, offset), min(stop, offset + unit.rows)
        if lo < hi:
            out.append(Piece(unit, lo - offset, hi - offset))
        offset += unit.rows
        if offset >= stop:
            break
    return out


def batches_per_window(*, batch_size: int, shuffle_buffer: int) -> int:
    """The batches of a window: those whose rows fit in the shuffle buffer, at least one."""
    return max(1, shuffle_buffer // batch_size)


def rank_windows(
    units: list[Unit],
    *,
    rank: int,
    world_size: int,
    batch_size: int,
    shuffle_buffer: int,
    drop_last: bool,
    seed: int,
    epoch: int,
) -> list[Window]:
    """The windows of ``rank`` in the epoch, in rank-local batch order."""
    ordered = epoch_units(units, seed=seed, epoch=epoch, shuffle=shuffle_buffer > 0)
    total = sum(u.rows for u in ordered)
    begin, end = total * rank // world_size, total * (rank + 1) // world_size
    count = batches_per_rank(total, world_size=world_size, batch_size=batch_size, drop_last=drop_last)
    if count == 0:
        return []
    if drop_last:
        sizes = [batch_size] * count
    else:  # np.array_split sizes: the rank's rows over `count` batches, none above batch_size
        smallest = total // world_size
        if smallest < count:
            raise ConfigError(
                f"{total:,} rows over {world_size} ranks cannot make {count} non-empty batches on every rank "
                f"with batch_size {batch_size}; use drop_last: true or a larger batch_size"
            )
        share = end - begin
        sizes = [share // count + (1 if i < share % count else 0) for i in range(count)]
    per_window = batches_per_window(batch_size=batch_size, shuffle_buffer=shuffle_buffer)
    windows, position = [], begin
    for index, first in enumerate(range(0, count, per_window)):
        window_sizes = tuple(sizes[first : first + per_window])
        rows = sum(window_sizes)
        windows.append(Window(index, tuple(_pieces(ordered, position, position + rows)), window_sizes, first))
        position += rows
    return windows


def delivery_order(batches_by_worker: list[int]) -> list[tuple[int, int]]:
    """(worker, its t-th batch) in the order DataLoader delivers them: round robin over workers not done."""
    order, taken = [], [0] * len(batches_by_worker)
    while len(order) < sum(batches_by_worker):
        for worker, count in enumerate(batches_by_worker):
            if taken[worker] < count:
                order.append((worker, taken[worker]))
                taken[worker] += 1
    return order


def worker_windows(windows: list[Window], *, worker: int, num_workers: int) -> list[Window]:
    """A worker's windows: a contiguous block of the rank's, so a row group spanning two adjacent
    windows is read once (the loader keeps the last one it read)."""
    count = len(windows)
    return windows[worker * count // num_workers : (worker + 1) * count // num_workers]


def resume_roles(windows: list[Window], *, num_workers: int, delivered: int) -> dict[int, tuple[int, int]]:
    """After ``delivered`` batches of the epoch: new worker -> (the original worker whose batches it yields,
    how many of them it skips).

    A fresh DataLoader starts its round robin at worker 0, so the workers still
    active are renumbered in the order their turns come next; the others idle.
    """
    counts = [sum(len(w.batch_sizes) for w in worker_windows(windows, worker=k, num_workers=num_workers))
              for k in range(num_workers)]  # fmt: skip
    order = delivery_order(counts)
    taken = [0] * num_workers
    for worker, _t in order[:delivered]:
        taken[worker] += 1
    if delivered >= len(order):
        return {}
    start = order[delivered][0]
    cycle = [(start + i) % num_workers for i in range(num_workers)]
    active = [w for w in cycle if taken[w] < counts[w]]
    return {new: (original, taken[original]) for new, original in enumerate(active)}


def window_permutation(rows: int, *, seed: int, epoch: int, rank: int, window: int, shuffle: bool) -> np.ndarray:
    """The order of a window's rows: a seeded permutation, or the identity without shuffling."""
    if not shuffle:
        return np.arange(rows)
    return _rng(seed, epoch, 2, rank, window).permutation(rows)
