"""The loader's split over ranks and workers, and resuming mid-epoch (real Delta files, torch DataLoader)."""

from __future__ import annotations

import datetime as dt
import gc
import itertools
import threading
import time
from collections import Counter

import pyarrow as pa
import pytest
from delta.tables import DeltaTable

import ingest.loader
from ingest.loader import ResumableLoader, SnapshotDataset, chunk_rows, plan_key
from ingest.plan import Unit, batches_per_rank, rank_windows
from ingest.projected_reads import IoCounter, read_chunks, read_row_groups
from ingest.snapshot import open_snapshot
from schemas.errors import ConfigError
from schemas.registry import parse_registry
from schemas.spark import table_schema
from warehouse.tables import replace_partition

DAYS = ["2026-11-01", "2026-11-02", "2026-11-03"]
SPAWN = {"multiprocessing_context": "spawn"}  # workers never inherit the test's JVM threads


@pytest.mark.parametrize(
    ("rows", "world_size", "batch_size", "buffer", "drop_last"),
    list(itertools.product([(1000,), (7, 300, 2), (5, 5, 5, 5)], [1, 2, 3], [1, 64], [0, 128], [False, True])),
)
def test_every_rank_gets_the_same_batch_count_and_every_row_once(rows, world_size, batch_size, buffer, drop_last):
    units = [Unit(i, 0, n) for i, n in enumerate(rows)]
    total, seen = sum(rows), Counter()
    counts = []
    if not drop_last and total // world_size < batches_per_rank(total, world_size=world_size, batch_size=batch_size,
                                                                  drop_last=False):
        with pytest.raises(ConfigError, match="cannot make .* non-empty batches on every rank"):
            rank_windows(units, rank=0, world_size=world_size, batch_size=batch_size, shuffle_buffer=buffer,
                         drop_last=drop_last, seed=3, epoch=1)  # fmt: skip
        return
    for rank in range(world_size):
        windows = rank_windows(units, rank=rank, world_size=world_size, batch_size=batch_size,
                               shuffle_buffer=buffer, drop_last=drop_last, seed=3, epoch=1)  # fmt: skip
        sizes = [s for w in windows for s in w.batch_sizes]
        counts.append(len(sizes))
        assert all(0 < s <= batch_size for s in sizes) and (not drop_last or set(sizes) <= {batch_size})
        for window in windows:
            assert sum(p.stop - p.start for p in window.pieces) == sum(window.batch_sizes)
            for piece in window.pieces:
                seen.update((piece.unit.file, r) for r in range(piece.start, piece.stop))
    assert len(set(counts)) == 1
    assert counts[0] == batches_per_rank(total, world_size=world_size, batch_size=batch_size, drop_last=drop_last)
    assert set(seen.values()) <= {1}
    if not drop_last:
        assert len(seen) == total


@pytest.fixture(scope="module")
def snapshot_and_registry(spark):
    """3 days x 2 files of 500 rows: 6 row groups."""
    dataset = "t_loader_table"
    raw = {"dataset": dataset, "labels": [{"name": "click", "window": "1h"}],
           "features": [{"name": "x", "kind": "dense", "dtype": "float32", "description": "d", "owner": "o"}]}
    registry = parse_registry(raw, source="inline")
    name = f"featurehouse.{dataset}"
    spark.sql("CREATE DATABASE IF NOT EXISTS featurehouse")
    DeltaTable.createIfNotExists(spark).tableName(name).addColumns(table_schema(registry)).partitionedBy("ds").property(
        "delta.columnMapping.mode", "name").execute()  # fmt: skip
    for ds in DAYS:
        frame = spark.range(1000).selectExpr(
            f"concat('{ds}-', id) AS impression_id", "id AS user_id", "id AS item_id",
            f"TIMESTAMP '{ds} 00:00:00' AS event_time", "CAST(id % 2 AS INT) AS label_click",
            "CAST(id AS FLOAT) AS x", f"'{ds}' AS ds",
        ).repartition(2)  # fmt: skip
        replace_partition(spark, name, frame, dt.date.fromisoformat(ds))
    location = spark.sql(f"DESCRIBE DETAIL {name}").first()["location"]
    return open_snapshot(location, [dt.date.fromisoformat(d) for d in DAYS]), registry


def ids(batch) -> list[str]:
    return batch.column("impression_id").to_pylist()


@pytest.mark.spark
def test_two_ranks_with_two_workers_read_every_row_once_in_equal_batch_counts(snapshot_and_registry):
    snapshot, registry = snapshot_and_registry
    assert len(snapshot.files) == 6
    per_rank = []
    for rank in range(2):
        dataset = SnapshotDataset(snapshot, registry, ["impression_id", "x"], batch_size=128, shuffle_buffer=512,
                                  seed=5, rank=rank, world_size=2)  # fmt: skip
        batches = list(ResumableLoader(dataset, num_workers=2, **SPAWN))
        assert len(batches) == len(dataset)
        per_rank.append([i for b in batches for i in ids(b)])
    assert len(per_rank[0]) == len(per_rank[1]) == 1500
    everything = Counter(per_rank[0] + per_rank[1])
    assert len(everything) == 3000 and set(everything.values()) == {1}
    assert per_rank[0][:10] != sorted(per_rank[0][:10])  # shuffled within windows


def test_row_groups_split_into_equal_chunks_of_at_most_chunk_rows():
    assert ingest.loader.CHUNK_ROWS == 16_384
    assert [chunk_rows(Unit(0, 0, n)) for n in (0, 1, 16_384, 16_385, 50_000, 1_000_000)] == [
        1, 1, 16_384, 8_193, 12_500, 16_130]


@pytest.mark.spark
def test_batches_are_the_same_whether_row_groups_are_read_whole_or_in_chunks(snapshot_and_registry, monkeypatch):
    snapshot, registry = snapshot_and_registry
    file = snapshot.files[0]
    whole = read_row_groups(file, snapshot, registry, ["impression_id", "x"], IoCounter(), row_groups=[0])
    chunks = list(read_chunks(file, snapshot, registry, ["impression_id", "x"], IoCounter(), row_group=0, chunk_rows=64))
    assert [c.num_rows for c in chunks] == [64] * 7 + [52] and pa.concat_tables(chunks).equals(whole)

    def batches(rank: int, skip: int = 0) -> list[list[str]]:
        dataset = SnapshotDataset(snapshot, registry, ["impression_id"], batch_size=100, shuffle_buffer=300, seed=9,
                                  rank=rank, world_size=2)  # fmt: skip
        loader = ResumableLoader(dataset)  # in this process, so the patched CHUNK_ROWS applies
        if skip:
            loader.load_state_dict({"epoch": 0, "delivered": skip, "plan": plan_key(dataset)})
        return [ids(b) for b in loader]

    read_whole = [batches(rank) for rank in range(2)]
    monkeypatch.setattr(ingest.loader, "CHUNK_ROWS", 64)  # 500-row row groups: 8 chunks of 63 or 59 rows
    assert chunk_rows(Unit(0, 0, 500)) == 63
    assert [batches(rank) for rank in range(2)] == read_whole
    assert batches(1, skip=4) == read_whole[1][4:]


@pytest.mark.spark
def test_resuming_after_k_batches_continues_exactly_where_it_stopped(snapshot_and_registry):
    snapshot, registry = snapshot_and_registry

    def loader() -> ResumableLoader:
        dataset = SnapshotDataset(snapshot, registry, ["impression_id"], batch_size=100, shuffle_buffer=300, seed=9)
        return ResumableLoader(dataset, num_workers=2, **SPAWN)

    whole = [ids(b) for b in loader()]
    first = loader()
    head = [ids(b) for b in itertools.islice(iter(first), 7)]
    state = first.state_dict()
    assert state["delivered"] == 7
    second = loader()
    second.load_state_dict(state)
    tail = [ids(b) for b in second]
    assert head + tail == whole and len(whole) == 30

    other = SnapshotDataset(snapshot, registry, ["impression_id"], batch_size=50, shuffle_buffer=300, seed=9)
    with pytest.raises(ConfigError, match="cannot resume: the saved state was made for"):
        ResumableLoader(other, num_workers=2).load_state_dict(state)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_resume_roles_continue_the_round_robin_for_every_k(workers):
    from ingest.plan import delivery_order, resume_roles, worker_windows

    units = [Unit(0, 0, 1000)]
    windows = rank_windows(units, rank=0, world_size=1, batch_size=30, shuffle_buffer=90, drop_last=False, seed=1,
                           epoch=0)  # 34 batches in 12 windows: the workers' counts differ  # fmt: skip
    counts = [sum(len(w.batch_sizes) for w in worker_windows(windows, worker=k, num_workers=workers))
              for k in range(workers)]  # fmt: skip
    original = delivery_order(counts)
    for k in range(len(original) + 1):
        roles = resume_roles(windows, num_workers=workers, delivered=k)
        remaining = [counts[orig] - skip for orig, skip in (roles.get(j, (0, counts[0])) for j in range(workers))]
        resumed = [(roles[j][0], roles[j][1] + t) for j, t in delivery_order(remaining)]
        assert resumed == original[k:], k


@pytest.mark.spark
def test_what_workers_read_is_added_up_in_the_loader(snapshot_and_registry):
    snapshot, registry = snapshot_and_registry
    dataset = SnapshotDataset(snapshot, registry, ["impression_id", "x"], batch_size=128, shuffle_buffer=512, seed=5)
    in_process = ResumableLoader(dataset)
    assert sum(b.num_rows for b in in_process) == 3000
    dataset = SnapshotDataset(snapshot, registry, ["impression_id", "x"], batch_size=128, shuffle_buffer=512, seed=5)
    workers = ResumableLoader(dataset, num_workers=2, **SPAWN)
    assert sum(b.num_rows for b in workers) == 3000
    for loader in (in_process, workers):
        counter = loader.counter
        assert (counter.rows, counter.batches) == (3000, len(dataset))
        assert sorted(counter.files_opened) == sorted(f.uri for f in snapshot.files)  # each file once, per process
        data_reads = counter.bytes_read - loader.dataset.footer_bytes  # the counter includes the planning footers
        assert counter.bytes_all_columns > data_reads > 0 and counter.wait_s > 0
    assert workers.counter.bytes_read == in_process.counter.bytes_read


def batching_threads() -> int:
    return sum(thread.name == "featurehouse-batches" for thread in threading.enumerate())


@pytest.mark.spark
def test_the_batching_thread_runs_on_into_the_next_epoch_and_stops_with_its_loader(snapshot_and_registry):
    snapshot, registry = snapshot_and_registry

    def loader(**args) -> ResumableLoader:
        dataset = SnapshotDataset(snapshot, registry, ["impression_id"], batch_size=100, shuffle_buffer=300, seed=9)
        return ResumableLoader(dataset, **args)

    asked = loader(prefetch=0)  # each batch made in this thread when asked
    want = [[ids(b) for b in asked] for _epoch in range(3)]
    assert want[0] != want[1] and sorted(sum(want[0], [])) == sorted(sum(want[1], []))  # each epoch its own order
    before = batching_threads()
    ahead = loader()
    assert [[ids(b) for b in ahead] for _epoch in range(3)] == want
    assert batching_threads() == before + 1  # now making epoch 3's first batches

    stopped = loader()
    head = [ids(b) for b in itertools.islice(iter(stopped), 7)]
    state = stopped.state_dict()
    assert head + [ids(b) for b in stopped] == want[0]  # the same thread goes on from batch 7
    resumed = loader()
    resumed.load_state_dict(state)
    assert [ids(b) for b in resumed] == want[0][7:]
    ahead.close()
    del stopped, resumed  # dropping a loader stops its thread
    gc.collect()
    assert batching_threads() == before

    once = loader(epochs=1)  # told how many epochs: no thread runs on past the last
    assert [ids(b) for b in once] == want[0]
    deadline = time.monotonic() + 5
    while batching_threads() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert batching_threads() == before


@pytest.mark.spark
@pytest.mark.parametrize("through", ["dataset", "loader"])
def test_a_corrupt_page_read_ahead_by_the_thread_fails_naming_the_file(snapshot_and_registry, tmp_path, through):
    from dataclasses import replace

    from schemas.errors import TableError

    snapshot, registry = snapshot_and_registry
    original = snapshot.files[1]
    data = bytearray(open(original.uri.removeprefix("file://"), "rb").read())
    data[4:1004] = bytes(1000)  # the first pages; the footer stays readable, so the plan is made
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(bytes(data))
    files = (snapshot.files[0], replace(original, uri=str(broken)), *snapshot.files[2:])
    dataset = SnapshotDataset(replace(snapshot, files=files), registry, ["impression_id", "x"], batch_size=100)
    with pytest.raises(TableError, match=r"data file .*broken\.parquet \(ds=2026-11-01\) is corrupt or truncated"):
        list(dataset if through == "dataset" else ResumableLoader(dataset))  # raised in the batching thread
