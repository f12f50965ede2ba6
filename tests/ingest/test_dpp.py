"""The preprocessing service on a real Ray cluster of two raylets on this machine (``ray.cluster_utils.Cluster``,
one CPU each), over a small Delta table written with deltalake: the same batches as the in-process reader, a
SIGKILLed worker losing and duplicating nothing, two ranks, resume, training from it, and the command (on the
local Ray instance it starts itself, whose listening sockets one run is watched for: loopback only).

One cluster serves the whole module; every loader starts its own actor pool on it (about 7 s here: each worker
imports torch and pyarrow), so each test reads a few small pipelines, not many.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pytest
import torch
import yaml

ray = pytest.importorskip("ray", reason="the preprocessing service needs Ray: pip install -e '.[dpp]' (make test does)")

from ingest.dpp import DppLoader, Split, parse_workers, plan_splits, ray_session  # noqa: E402
from ingest.loader import ResumableLoader, SnapshotDataset, TableBlock  # noqa: E402
from ingest.job_reader import open_reader  # noqa: E402
from ingest.spec import load_spec  # noqa: E402
from schemas.errors import ConfigError  # noqa: E402

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[2]
DAYS = ["2026-11-01", "2026-11-02", "2026-11-03"]
ROWS_PER_DAY = 2000
BATCH, BUFFER = 200, 600  # windows of 3 batches; 30 batches an epoch


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """featurehouse.dpp (3 days of 2,000 rows, two files a day), an empty feature_usage, the registry, a job."""
    from deltalake import write_deltalake

    from schemas.catalog import FEATURE_USAGE, FEATURE_USAGE_SCHEMA, catalog_table_uri, managed_table_uri

    root = tmp_path_factory.mktemp("dpp_home")
    registry = {"dataset": "dpp", "labels": [{"name": "click", "window": "1h"}], "features": [
        *({"name": f"d{i}", "kind": "dense", "dtype": "float32", "description": "d", "owner": "o"} for i in range(2)),
        {"name": "ids", "kind": "sparse", "dtype": "int64", "default": [], "description": "u", "owner": "o"},
    ]}  # fmt: skip
    (root / "registry").mkdir()
    (root / "registry" / "dpp.yaml").write_text(yaml.safe_dump(registry))
    rng = np.random.default_rng(5)
    table = managed_table_uri(str(root / "warehouse"), "featurehouse", "dpp")
    for ds in DAYS:
        for half in range(2):
            n = ROWS_PER_DAY // 2
            lengths = rng.integers(0, 5, n)
            write_deltalake(table, pa.table({
                "impression_id": pa.array([f"{ds}-{half}-{i}" for i in range(n)]),
                "d0": rng.normal(0, 1, n).astype(np.float32), "d1": rng.lognormal(0, 1, n).astype(np.float32),
                "ids": pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(lengths)].astype(np.int32)),
                                                pa.array(rng.integers(0, 10_000, lengths.sum()))),
                "label_click": (rng.random(n) < 0.2).astype(np.int32),
                "ds": pa.array([ds] * n),
            }), mode="append", partition_by=["ds"])  # fmt: skip
    write_deltalake(catalog_table_uri(str(root / "warehouse"), FEATURE_USAGE), FEATURE_USAGE_SCHEMA.empty_table())
    spec = {
        "job_id": "dpp-job", "dataset": "dpp", "ds": {"from": DAYS[0], "to": DAYS[1]},
        "features": [{"name": "d0"}, {"name": "d1", "transforms": [{"clamp": [0, None]}, "log1p"]},
                     {"name": "ids", "transforms": [{"hash": 500}]}],
        "labels": ["click"], "batch_size": BATCH, "shuffle_buffer": BUFFER, "seed": 4,
        "model": {"embedding_dim": 4, "bottom_mlp": [8], "top_mlp": [8]},
        "train": {"eval_ds": [DAYS[2]], "epochs": 2, "learning_rate": 0.05},
    }  # fmt: skip
    (root / "job.yaml").write_text(yaml.safe_dump(spec))
    return root


@pytest.fixture(scope="module")
def cluster():
    """Two raylets (a head and one more node) of one CPU each, this process connected as the driver."""
    from ray.cluster_utils import Cluster

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    made = Cluster(initialize_head=True, connect=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    made.add_node(num_cpus=1)
    made.wait_for_nodes()
    try:
        yield made
    finally:
        ray.shutdown()
        made.shutdown()


def reader_of(home: Path, *, rank: int = 0, world_size: int = 1):
    spec, registry = load_spec(home / "job.yaml", registry_dir=home / "registry")
    return open_reader(spec, registry, warehouse=str(home / "warehouse"), rank=rank, world_size=world_size)


def keyed(reader, **kwargs) -> SnapshotDataset:
    """The same plan as ``reader``'s, reading ids and raw values as pyarrow tables (TableBlock)."""
    d = reader.dataset
    return SnapshotDataset(d.snapshot, d.registry, ["impression_id", "d0", "ids"], batch_size=d.batch_size,
                           shuffle_buffer=d.shuffle_buffer, seed=d.seed, drop_last=d.drop_last, rank=d.rank,
                           world_size=d.world_size, **kwargs)  # fmt: skip


class SlowBlocks:
    """TableBlock after a pause per chunk: splits take long enough that both workers take part and a kill lands
    while they work."""

    def __call__(self, table: pa.Table) -> TableBlock:
        time.sleep(0.15)
        return TableBlock(table)


def rows_of(tables) -> list[tuple]:
    return [(i, d, tuple(ids)) for t in tables for i, d, ids in zip(*(t.column(c).to_pylist() for c in
                                                                     ("impression_id", "d0", "ids")))]  # fmt: skip


def same_batches(got, want) -> bool:
    return len(got) == len(want) and all(
        torch.equal(g.dense, w.dense) and torch.equal(g.values, w.values) and torch.equal(g.lengths, w.lengths)
        and torch.equal(g.labels, w.labels) for g, w in zip(got, want, strict=True)
    )  # fmt: skip


def test_two_raylets_deliver_the_in_process_readers_batches_and_rows(home, cluster):
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    reader = reader_of(home)
    local = list(ResumableLoader(reader_of(home).dataset, epochs=1))
    lines: list[str] = []
    loader = DppLoader(reader.dataset, workers=(2, 2), epochs=1, progress=lines.append, split_rows=1)
    served = list(loader)
    assert same_batches(served, local)  # tensors equal, batch by batch, in the plan's order
    assert loader.counter.rows == 4000 and loader.counter.batches == 20 and loader.counter.bytes_read > 0
    assert loader.splits_done == len(loader.splits) == 7  # one split per window of 3 batches (the last has 2)
    assert "splits 7 done / 0 pending" in lines[-1] and "samples/s delivered" in lines[-1]

    # Raw rows and ids, order-insensitively: the same multiset as the in-process reader's, each row once.
    tables = DppLoader(keyed(reader, convert=SlowBlocks()), workers=(2, 2), epochs=1, split_rows=1)
    rows = rows_of(tables)
    assert Counter(rows) == Counter(rows_of(ResumableLoader(keyed(reader), epochs=1)))
    assert len({r[0] for r in rows}) == len(rows) == 4000
    nodes = {where.split(":")[0] for where in tables.workers_seen}
    assert len(nodes) == 2, tables.workers_seen  # both raylets' workers made batches


def dead(pid: int, wait_s: float = 30.0) -> bool:
    """Whether the process has exited: gone from /proc, or a zombie its raylet has not reaped yet (a SIGKILLed
    child stays in the process table until its parent waits on it, so ``os.kill(pid, 0)`` alone can still
    succeed after the kill)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def test_a_worker_killed_mid_epoch_loses_and_duplicates_no_row(home, cluster):
    reader = reader_of(home)
    loader = DppLoader(keyed(reader, convert=SlowBlocks()), workers=(2, 2), epochs=1, split_rows=1)
    batches = iter(loader)
    got = [next(batches)]
    victim = int(next(iter(loader.workers_seen)).split(":")[1])
    os.kill(victim, signal.SIGKILL)
    got.extend(batches)
    assert dead(victim)  # it is gone
    ids = [r[0] for r in rows_of(got)]
    assert len(ids) == len(set(ids)) == 4000  # every row exactly once
    assert rows_of(got) == rows_of(ResumableLoader(keyed(reader), epochs=1))  # and in the plan's order
    # Ray restarted the killed actor in a new process (and retried the split it was running there).
    from ray._private import state

    restarts = [a["NumRestarts"] for a in state.actors().values() if "SplitWorker" in a["ActorClassName"]]
    assert max(restarts) >= 1, restarts


def test_two_ranks_get_equal_batch_counts_over_disjoint_rows(home, cluster):
    counts, ids = [], []
    for rank in range(2):
        loader = DppLoader(keyed(reader_of(home, rank=rank, world_size=2)), workers=(1, 2), epochs=1)
        tables = list(loader)
        counts.append(len(tables))
        ids.append({r[0] for r in rows_of(tables)})
    assert counts == [10, 10]
    assert not ids[0] & ids[1] and len(ids[0] | ids[1]) == 4000


def test_resume_reads_only_the_splits_not_consumed(home, cluster):
    local = list(ResumableLoader(reader_of(home).dataset, epochs=1))
    first = DppLoader(reader_of(home).dataset, workers=(1, 1), epochs=1, split_rows=1)
    taken = []
    for batch in first:
        taken.append(batch)
        if len(taken) == 7:  # the second batch of the third window
            break
    state = first.state_dict()
    first.close()
    assert state["epoch"] == 0 and state["delivered"] == 7

    resumed = DppLoader(reader_of(home).dataset, workers=(1, 1), epochs=1, split_rows=1)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert resumed.splits[0] == Split(epoch=0, first=2, stop=3, skip=1, batches=2)  # windows 0 and 1 not read
    assert len(resumed.splits) == 5
    assert same_batches(taken + rest, local)
    # The next epoch, past the one the pipeline was planned for, comes from a new pipeline, as in process.
    two_epochs = ResumableLoader(reader_of(home).dataset, epochs=2)
    list(two_epochs)
    assert resumed.dataset.epoch == 1 and same_batches(list(resumed), list(two_epochs))
    # A checkpoint means the same position to the in-process loader (no worker processes) and to the service.
    in_process = ResumableLoader(reader_of(home).dataset, epochs=1)
    in_process.load_state_dict(state)
    assert same_batches(list(in_process), rest)
    with pytest.raises(ConfigError, match="cannot resume: the saved state was made for"):
        DppLoader(reader_of(home, rank=1, world_size=2).dataset).load_state_dict(state)


def test_plan_splits_cover_the_epoch_in_runs_of_windows(home):
    dataset = reader_of(home).dataset
    splits = plan_splits(dataset, epoch=0, delivered=0, until=2, split_rows=1000)
    assert [(s.epoch, s.first, s.stop, s.batches) for s in splits] == [
        (0, 0, 2, 6), (0, 2, 4, 6), (0, 4, 6, 6), (0, 6, 7, 2),
        (1, 0, 2, 6), (1, 2, 4, 6), (1, 4, 6, 6), (1, 6, 7, 2)]  # fmt: skip
    assert sum(s.batches for s in splits) == 2 * len(dataset)
    assert plan_splits(dataset, epoch=0, delivered=19, until=1, split_rows=1000) == [Split(0, 6, 7, 1, 1)]


def test_an_address_nobody_answers_is_refused_at_once_naming_it(monkeypatch):
    import socket

    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # "At once": one connection attempt with a timeout, and Ray (whose ray.init retries for minutes) never asked.
    attempts, connect = [], socket.create_connection

    def counted(where, timeout=None, *args, **kwargs):
        attempts.append((where, timeout))
        return connect(where, timeout, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", counted)
    monkeypatch.setattr(ray, "init", lambda *a, **kw: pytest.fail(f"ray.init{a, kw} was called for a dead address"))
    with pytest.raises(ConfigError, match=rf"no Ray cluster answers at 127.0.0.1:{port} .*ray start --head --port {port}"):
        with ray_session(f"127.0.0.1:{port}"):
            pass
    assert attempts == [(("127.0.0.1", port), 5)]


@pytest.mark.parametrize("text, expected", [("1:4", (1, 4)), ("3", (3, 3)), ("2:2", (2, 2))])
def test_worker_bounds_parse(text, expected):
    assert parse_workers(text) == expected


@pytest.mark.parametrize("text", ["0:2", "3:1", "a:b", "1:2:3", ""])
def test_bad_worker_bounds_are_refused_naming_the_flag(text):
    with pytest.raises(ConfigError, match=r"--workers .*: give MIN:MAX with 1 <= MIN <= MAX"):
        parse_workers(text)


def test_training_from_the_service_equals_training_in_process(home, cluster):
    from trainer.train import TrainConfig, run

    def train(name: str, **kwargs):
        config = TrainConfig(job=home / "job.yaml", home=home, registry_dir=home / "registry", device="cpu",
                             out=home / "runs" / name, record=False, **kwargs)  # fmt: skip
        lines: list[str] = []
        result = run(config, progress=lines.append)
        weights = torch.load(home / "runs" / name / "checkpoint-rank0-of-1.pt", weights_only=False)["model"]
        return result, weights, lines

    served, served_weights, lines = train("served", dpp=True, dpp_address=cluster.address)
    local, local_weights, _ = train("local")
    assert served.clock.samples == local.clock.samples == 2 * 4000
    assert all(torch.equal(served_weights[k], local_weights[k]) for k in local_weights)  # the same batches, in order
    assert served.metrics["click"].auc == local.metrics["click"].auc
    assert any(line.startswith("  dpp: ") and "splits" in line for line in lines)


@dataclass
class CommandRun:
    """What ``featurehouse dpp`` printed, and what its process tree listened on while it ran."""

    returncode: int
    stdout: str
    stderr: str
    usage_rows_before: int
    listening: dict[tuple[int, str, int], str]  # (pid, address, port) -> process name
    auth_mode: dict[str, str | None]  # gcs_server, raylet -> RAY_AUTH_MODE in its environment


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _watch(process: psutil.Process, run: CommandRun) -> None:
    """Record ``process``'s listening TCP sockets, and a gcs_server's or raylet's RAY_AUTH_MODE."""
    try:
        name = process.name()
        connections = (process.net_connections if hasattr(process, "net_connections") else process.connections)("tcp")
        if name in ("gcs_server", "raylet") and name not in run.auth_mode:
            run.auth_mode[name] = process.environ().get("RAY_AUTH_MODE")
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # gone between the listing and the look
        return
    for c in connections:
        if c.status == psutil.CONN_LISTEN:
            run.listening[(process.pid, c.laddr.ip, c.laddr.port)] = name


@pytest.fixture(scope="module")
def command_run(home, tmp_path_factory) -> CommandRun:
    """``featurehouse dpp`` on its own Ray (the embedded default: no --address), its process tree's listening
    sockets sampled every 0.2 s while it runs (the Ray processes are its children and grandchildren)."""
    import deltalake

    from schemas.catalog import FEATURE_USAGE, catalog_table_uri

    usage = catalog_table_uri(str(home / "warehouse"), FEATURE_USAGE)
    out = tmp_path_factory.mktemp("dpp_command")
    run = CommandRun(0, "", "", deltalake.DeltaTable(usage).to_pyarrow_table().num_rows, {}, {})
    with open(out / "stdout", "w") as stdout, open(out / "stderr", "w") as stderr:  # files: a full pipe blocks it
        command = subprocess.Popen(
            [sys.executable, "-m", "featurehouse.cli", "dpp", "--job", str(home / "job.yaml"), "--home", str(home),
             "--registry-dir", str(home / "registry"), "--workers", "1:2", "--epochs", "2", "--report-every", "1"],
            stdout=stdout, stderr=stderr, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        deadline = time.monotonic() + 300
        try:
            while command.poll() is None and time.monotonic() < deadline:
                for process in _tree(command.pid):
                    _watch(process, run)
                time.sleep(0.2)
        finally:
            if command.poll() is None:
                command.kill()  # its Ray processes follow: Ray's reaper stops them when their driver dies
            run.returncode = command.wait()
    run.stdout, run.stderr = (out / "stdout").read_text(), (out / "stderr").read_text()
    return run


def test_featurehouse_dpp_runs_a_session_on_its_own_ray_and_records_it_once(home, command_run):
    """The embedded default: without --address the command starts a local Ray instance and stops it."""
    import deltalake

    from schemas.catalog import FEATURE_USAGE, catalog_table_uri

    done = command_run
    assert done.returncode == 0, done.stderr[-3000:]
    assert "dpp dpp-job: dpp version" in done.stdout and "2 epochs of 20 batches" in done.stdout
    assert "40 batches, 8,000 rows" in done.stdout and "splits 0 done / 0 pending" not in done.stdout
    # Each epoch's last line: the worker processes that delivered batches (not Ray's count of actors alive, which
    # said 0 once the pool had finished), and the client's wait rather than a trainer's stall (no trainer runs).
    ends = [line for line in done.stdout.splitlines() if line.startswith("  dpp: ") and "/ 0 pending" in line]
    made_by = re.search(r"made by (\d+) worker process", done.stdout)
    assert ends and made_by and int(made_by.group(1)) >= 1, done.stdout
    delivered = [int(re.match(r"  dpp: (\d+) workers? delivered batches, ", line).group(1)) for line in ends]
    assert 1 <= delivered[-1] == int(made_by.group(1)), done.stdout  # the same workers the summary names
    assert all(re.search(r"client wait \d+\.\d%", line) and "trainer" not in line for line in ends), ends
    after = deltalake.DeltaTable(catalog_table_uri(str(home / "warehouse"), FEATURE_USAGE)).to_pyarrow_table()
    assert after.num_rows == done.usage_rows_before + 1
    record = after.to_pylist()[-1]
    assert record["job_id"] == "dpp-job" and record["rows_read"] == 8000 and record["batches"] == 40
    assert record["bytes_read"] > 0 and record["features"] == ["d0", "d1", "ids"] and record["decode_s"] > 0


def test_the_embedded_ray_listens_on_the_loopback_only_with_token_auth(command_run):
    """Every TCP socket the command's Ray instance (GCS, raylet, workers, the driver) listened on while the session
    ran is on 127.0.0.1 or ::1 (or ::ffff:127.0.0.1, a dual-stack socket's view of it), and the instance's servers
    run with token authentication."""
    import ipaddress

    assert command_run.returncode == 0, command_run.stderr[-3000:]
    names = set(command_run.listening.values())
    # The sampling saw the instance's servers and a worker: the check below is not over an empty list.
    assert {"gcs_server", "raylet"} <= names and any(n.startswith("ray::") for n in names), command_run.listening

    def loopback(address: str) -> bool:
        ip = ipaddress.ip_address(address)
        return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)

    outside = sorted(f"{name} pid {pid} on {address}:{port}" for (pid, address, port), name in
                     command_run.listening.items() if not loopback(address))  # fmt: skip
    assert not outside, "\n".join(outside)
    assert command_run.auth_mode == {"gcs_server": "token", "raylet": "token"}
