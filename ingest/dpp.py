"""The preprocessing service (DPP): the reader's per-split work on a Ray cluster's CPU workers, batches to the trainer.

    with ray_session(address=None):                      # a local Ray instance, stopped at the end
        loader = DppLoader(reader.dataset, workers=(1, 2), epochs=3)
        for batch in loader: ...                         # the same Batch objects as ResumableLoader's, same order
        state = loader.state_dict()                      # resume later: loader.load_state_dict(state)

The job spec is the session's spec, and the work items (splits) are runs of the windows of
``ingest/plan.py`` (consecutive batches of this rank's epoch, whose rows are shuffled together),
each a contiguous range of the pinned snapshot's row groups of at least ``SPLIT_ROWS`` rows::

    trainer process (the client)                        Ray cluster (Ray Data's streaming executor)
    this rank's splits: (epoch, windows, skip) ... -->  from_items -> map_batches(SplitWorker) on an actor pool
                                                        of MIN..MAX workers, scaled by Ray Data with backpressure
                                                        worker: dataset.window_batches(windows, skip=skip)
    Batch <- unpickled <- blocks in split order    <--  (Batch, cost) pickled, one row per batch

Nothing here schedules, retries or sends anything itself: Ray Data runs the splits on its actor pool
(actors restart and their tasks are retried when a worker process dies, and a retried split yields the
same rows again, which Ray's streaming generators count only once), keeps the output in split order
(``preserve_order``), and holds the workers back when the trainer falls behind. Since the order is the
plan's, a rank receives exactly the batches the in-process reader would make, in the same order: every
rank the same number over disjoint rows, and a checkpoint's position means the same in both, so a run
can resume either way. Resuming skips the splits already consumed without reading them, and the
first batches of a split consumed in part.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import pickle
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ingest.loader import SnapshotDataset, check_plan, plan_key
from ingest.projected_reads import IoCounter
from schemas.config import POSITIVE_INT, satisfies
from schemas.errors import ConfigError
from schemas.progress import Progress, silent

#: seconds between progress lines
REPORT_EVERY_S = 10.0
#: rows a split covers at least (whole windows): larger splits read fewer chunks twice, smaller ones balance better
SPLIT_ROWS = 65_536


@dataclass(frozen=True)
class Split:
    """A work item: windows ``[first, stop)`` of this rank's ``epoch``, without their first ``skip`` batches."""

    epoch: int
    first: int
    stop: int
    skip: int
    batches: int  # what it yields: its windows' batches less ``skip``


def parse_workers(text: str, *, flag: str = "--workers") -> tuple[int, int]:
    """``MIN:MAX`` (or ``N`` for a fixed pool) into (min, max), refused naming the flag when malformed."""
    parts = text.split(":")
    try:
        low, high = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (None, None)
    except ValueError:
        low = high = None
    if low is None or high is None or not 1 <= low <= high:
        raise ConfigError(f"{flag} {text!r}: give MIN:MAX with 1 <= MIN <= MAX (e.g. 1:4), or N for a fixed pool")
    return low, high


def plan_splits(dataset: SnapshotDataset, *, epoch: int, delivered: int, until: int,
                split_rows: int = SPLIT_ROWS) -> list[Split]:  # fmt: skip
    """This rank's splits from batch ``delivered`` of ``epoch`` through the end of epoch ``until - 1``: runs of
    consecutive windows of at least ``split_rows`` rows (the last of an epoch may have fewer), so that a chunk two
    windows share is mostly read once; the windows consumed before a resume are left out, not read."""
    splits = []
    for e in range(epoch, max(until, epoch + 1)):
        skip = delivered if e == epoch else 0
        first = rows = batches = 0
        windows = dataset.windows(e)
        for index, window in enumerate(windows):
            count = len(window.batch_sizes)
            if skip >= count and batches == 0:  # consumed before the checkpoint: not read again
                skip -= count
                first = index + 1
                continue
            rows += sum(window.batch_sizes)
            batches += count
            if rows >= split_rows or index == len(windows) - 1:
                splits.append(Split(e, first, index + 1, skip, batches - skip))
                first, rows, batches, skip = index + 1, 0, 0, 0
    return splits


class SplitWorker:
    """One Ray actor of the pool: the reader's per-split code (``SnapshotDataset.window_batches``) on its splits."""

    def __init__(self, dataset: SnapshotDataset) -> None:
        self.dataset = dataset
        self.dataset.with_costs = True
        import ray

        self.where = f"{ray.get_runtime_context().get_node_id()[:12]}:{os.getpid()}"  # node:pid
        self._windows: tuple[int, list] = (-1, [])  # (epoch, its windows): planned once per epoch, not per split

    def __call__(self, splits: dict[str, Any]) -> Iterator[dict[str, list]]:
        for epoch, first, stop, skip in zip(splits["epoch"], splits["first"], splits["stop"], splits["skip"],
                                            strict=True):  # fmt: skip
            epoch, first, stop, skip = int(epoch), int(first), int(stop), int(skip)
            if self._windows[0] != epoch:
                self._windows = (epoch, self.dataset.windows(epoch))
            windows = self._windows[1][first:stop]
            for index, item in enumerate(self.dataset.window_batches(windows, epoch=epoch, skip=skip), start=skip):
                yield {"epoch": [epoch], "split_first": [first], "batch": [index], "worker": [self.where],
                       "payload": [pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)]}  # fmt: skip


@contextmanager
def ray_session(address: str | None = None) -> Iterator[None]:
    """Ray for the session: connected to ``address`` (``auto``, ``ray://host:10001``, ``host:6379``), or a local
    instance started here and stopped on exit when it is None (see :func:`_start_local_ray`: every server on the
    loopback, no dashboard, token authentication on). An already connected process keeps its connection."""
    import ray

    if address is not None:
        _check_reachable(address)
    if ray.is_initialized():
        yield
        return
    try:
        if address is None:
            _start_local_ray()
        else:
            ray.init(address=address, logging_level=logging.WARNING)
    except (ConnectionError, ValueError, RuntimeError) as err:
        where = address or "a local instance"
        raise ConfigError(f"cannot start or reach Ray at {where}: {err}; run `ray start --head` on the cluster's "
                          "head and pass its address, or leave --address out for a local instance") from err  # fmt: skip
    try:
        yield
    finally:
        ray.shutdown()


def _start_local_ray() -> None:
    """A Ray instance for this process alone, reachable from this host only.

    Ray's servers (the GCS, the raylet's two ports, each worker's and this driver's gRPC server, the runtime-env
    agent) bind to the loopback only when the node's IP is 127.0.0.1; otherwise they listen on every interface.
    ``ray.init(_node_ip_address="127.0.0.1")`` does not give that: ray.init replaces a loopback address with the
    host's outward one, unless Ray's single-host switch is off (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``, off by
    default on macOS and Windows only, read once at import into ``ray_constants.ENABLE_RAY_CLUSTER``). It is turned
    off for this ray.init only, so the node's IP is the loopback's; checked after, since Ray could change this.
    The dashboard stays off. Token authentication is left to Ray, whose default for a local instance (2.60) is on:
    ray.init sets ``RAY_AUTH_MODE=token`` for itself and the processes it starts, and keeps the token in
    ``~/.ray/auth_token`` (made if missing); an explicit ``RAY_AUTH_MODE`` in the environment is obeyed.
    """
    import ray
    from ray._private import ray_constants

    single_host = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False  # node IP 127.0.0.1, not replaced by the host's outward address
    try:
        ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = single_host
    node_ip = ray.util.get_node_ip_address()
    if not _is_loopback(node_ip):
        ray.shutdown()
        raise ConfigError(f"the local Ray instance took node address {node_ip}, not the loopback, so its servers "
                          f"would listen on every interface (Ray {ray.__version__} ignores the single-host switch that "
                          "Ray 2.60 honours); install ray 2.60, or start a cluster with `ray start --head` and pass "
                          "its address with --address")  # fmt: skip


def _is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1, or an IPv4-mapped loopback (``::ffff:127.0.0.1``, how a dual-stack socket shows it)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or (isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None
                              and ip.ipv4_mapped.is_loopback)  # fmt: skip


def _check_reachable(address: str) -> None:
    """Refuse a HOST:PORT (or ray://HOST:PORT) nobody listens on at once: ray.init would retry it for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # auto, or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as err:
        raise ConfigError(f"no Ray cluster answers at {address} ({err}); start one with `ray start --head --port "
                          f"{port}` there, or leave --address out for a local Ray instance") from err  # fmt: skip


class DppLoader:
    """The reader's batches made by the preprocessing service, with :class:`ingest.loader.ResumableLoader`'s
    interface: one epoch per iteration, ``counter``, ``delivered``, ``state_dict()``, ``close()``.

    ``workers`` (MIN, MAX) bounds the actor pool Ray Data scales (per rank); ``epochs`` lets one pipeline run on
    into the following epochs, as the in-process batching thread does. Progress goes to ``progress`` every
    ``report_every`` seconds and at each epoch's end; ``workers_seen`` maps each worker (node:pid) to the batches
    it made. ``split_rows``: see :func:`plan_splits`; ``pin_memory`` pins each batch for a CUDA copy. Needs a Ray
    connection (:func:`ray_session`).
    """

    def __init__(self, dataset: SnapshotDataset, *, workers: tuple[int, int] = (1, 2), epochs: int | None = None,
                 progress: Progress | None = None, report_every: float = REPORT_EVERY_S,
                 split_rows: int = SPLIT_ROWS, pin_memory: bool = False) -> None:  # fmt: skip
        low, high = workers
        if not 1 <= low <= high:
            raise ConfigError(f"workers {workers}: give (MIN, MAX) with 1 <= MIN <= MAX")
        if not satisfies(split_rows, POSITIVE_INT):
            raise ConfigError(f"split_rows {split_rows} must be >= 1 (rows of whole windows per split)")
        self.dataset, self.workers, self.epochs = dataset, (low, high), epochs
        self.split_rows, self.pin_memory = split_rows, pin_memory
        self.progress, self.report_every = progress or silent, report_every
        self.delivered = 0
        self.counter = IoCounter(bytes_read=dataset.footer_bytes, requests=dataset.footer_requests)  # the plan's footers
        self.workers_seen: dict[str, int] = {}
        self.splits: list[Split] = []  # the running pipeline's, in order
        self.splits_done = 0
        self._rows: Iterator[tuple[int, int, int, str, Any]] | None = None
        self._position: tuple[int, int] | None = None  # (epoch, batch) of the next row the pipeline gives
        self._until = 0  # the pipeline's splits end before this epoch
        self._split = self._index = 0  # the split and batch the next row must be
        self._started: float | None = None  # the first batch asked for
        self.first_batch_s: float | None = None  # seconds from then to the first batch's arrival
        self._last_report = 0.0

    def _pipeline(self, epoch: int, delivered: int) -> Iterator[tuple[int, int, int, str, Any]]:
        """(epoch, split's first window, batch, worker, payload) of the splits from ``(epoch, delivered)`` on, in
        split order."""
        import ray

        until = self._until = self.epochs if self.epochs is not None and epoch < self.epochs else epoch + 1
        self.splits = plan_splits(self.dataset, epoch=epoch, delivered=delivered, until=until,
                                  split_rows=self.split_rows)  # fmt: skip
        self.splits_done = 0
        if not self.splits:
            return
        self._split, self._index = 0, self.splits[0].skip
        logging.getLogger("ray.data").setLevel(logging.ERROR)  # its per-dataset lines: this loader prints its own
        items = [{"epoch": s.epoch, "first": s.first, "stop": s.stop, "skip": s.skip} for s in self.splits]
        low, high = self.workers
        made = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            SplitWorker, fn_constructor_kwargs={"dataset": self.dataset}, batch_size=1, num_cpus=1,
            compute=ray.data.ActorPoolStrategy(min_size=low, max_size=high),
        )  # fmt: skip
        made.context.execution_options.preserve_order = True  # the plan's order: the in-process reader's batches
        made.context.enable_progress_bars = False  # (the dataset's own context: nothing global changes)
        blocks = iter(made.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=2))
        try:
            for block in blocks:
                columns = [block.column(name).to_pylist() for name in ("epoch", "split_first", "batch", "worker",
                                                                       "payload")]  # fmt: skip
                yield from zip(*columns, strict=True)
        finally:
            blocks.close()  # shuts the execution down now (its threads must not outlive the Ray session)

    def _next_rows(self) -> Iterator[tuple[int, int, int, str, Any]]:
        position = (self.dataset.epoch, self.delivered)
        if self._rows is None or self._position != position or position[0] >= self._until:
            self.close()
            self._rows = self._pipeline(*position)
            self._position = position
        return self._rows

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self) -> Iterator[Any]:
        epoch, expected = self.dataset.epoch, len(self.dataset)
        if self._started is None:
            self._started = self._last_report = time.perf_counter()
        rows = self._next_rows()
        while self.delivered < expected:
            started = time.perf_counter()
            try:
                row_epoch, first, index, worker, payload = next(rows)
            except StopIteration:
                raise ConfigError(f"the preprocessing service ended epoch {epoch} after {self.delivered} of "
                                  f"{expected} batches; see the Ray workers' logs") from None  # fmt: skip
            batch, cost = pickle.loads(payload)
            if self.pin_memory:
                batch = batch.pin_memory()
            arrived = time.perf_counter()
            self.counter.wait_s += arrived - started
            if self.first_batch_s is None:
                self.first_batch_s = arrived - self._started
            plan = self.splits[self._split]
            if (row_epoch, first, index) != (plan.epoch, plan.first, self._index):
                raise ConfigError(f"the preprocessing service gave batch {index} of the split at window {first} "
                                  f"(epoch {row_epoch}) where the plan has batch {self._index} of the split at "
                                  f"window {plan.first} (epoch {plan.epoch})")  # fmt: skip
            self._index += 1
            if self._index == plan.skip + plan.batches:  # the split is done: the next one's first batch is next
                self._split += 1
                self.splits_done += 1
                self._index = self.splits[self._split].skip if self._split < len(self.splits) else 0
            self.counter.merge(cost)
            self.workers_seen[worker] = self.workers_seen.get(worker, 0) + 1
            self.delivered += 1
            self._position = (epoch, self.delivered)
            self._report()
            yield batch
        self.dataset.epoch += 1
        self.delivered = 0
        self._position = (self.dataset.epoch, 0) if self._rows is not None else None
        self._report(force=True)

    def _report(self, *, force: bool = False) -> None:
        now = time.perf_counter()
        if self._started is None or (not force and now - self._last_report < self.report_every):
            return
        self._last_report = now
        elapsed = max(now - self._started, 1e-9)
        first = "" if self.first_batch_s is None else f" ({self.first_batch_s:.1f} s of it for the first batch)"
        workers = len(self.workers_seen)  # worker processes that delivered a batch (a restarted actor counts again)
        self.progress(f"  dpp: {workers} worker{'' if workers == 1 else 's'} delivered batches, splits "
                      f"{self.splits_done:,} done / {len(self.splits) - self.splits_done:,} pending, "
                      f"{self.counter.rows / elapsed:,.0f} samples/s delivered, client wait "
                      f"{self.counter.wait_s / elapsed:.1%}{first}")  # fmt: skip

    def close(self) -> None:
        """Stop the running pipeline (its workers go with it)."""
        if self._rows is not None:
            self._rows.close()  # type: ignore[attr-defined]
        self._rows = self._position = None

    def state_dict(self) -> dict[str, Any]:
        """The same position, and plan, as an in-process loader's without worker processes: either resumes it."""
        return {"epoch": self.dataset.epoch, "delivered": self.delivered, "plan": plan_key(self.dataset)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_plan(state, self.dataset)
        self.close()
        self.dataset.epoch, self.delivered = int(state["epoch"]), int(state["delivered"])
