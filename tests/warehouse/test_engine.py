"""The engine (``warehouse.engine``): a real Spark Connect server for one home, and real commands as its clients,
each in a process of its own (``featurehouse sql``), as a user runs them.

One engine serves the module where it can; the tests that need another (a restart after SIGKILL, one for new
code, the idle stop) say so. Every engine started here is stopped at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from warehouse.engine.client import running_engine
from warehouse.engine.state import EngineFiles, read_json, write_json
from warehouse.processes import free_ports

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
FEATUREHOUSE = str(Path(sys.executable).parent / "featurehouse")


def run(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FEATUREHOUSE_ENGINE_IDLE_MINUTES": "10"}  # an engine a killed test leaves stops itself
    done = subprocess.run([FEATUREHOUSE, *args, "--home", str(home)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    if check:
        assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def sql(home: Path, statement: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return run(home, "sql", "--format", "json", statement, *flags)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("engine_home")
    yield home
    run(home, "engine", "stop", check=False)


def engine_pids(home: Path) -> set[int]:
    """The engine's Python process and its JVM."""
    state = running_engine(EngineFiles(home))
    assert state is not None, "no engine runs"
    parent = psutil.Process(state.pid)
    return {parent.pid, *(child.pid for child in parent.children(recursive=True))}


def test_two_commands_at_once_start_one_engine_and_later_ones_reuse_it(home):
    commands = [subprocess.Popen([FEATUREHOUSE, "sql", "--format", "json", f"SELECT {i} AS x", "--home", str(home)],
                                 cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(2)]  # fmt: skip
    outputs = [c.communicate(timeout=300) for c in commands]
    assert [c.returncode for c in commands] == [0, 0], outputs
    assert [json.loads(out) for out, _ in outputs] == [[{"x": 0}], [{"x": 1}]]
    starts = [err for _, err in outputs if "starting the engine for" in err]
    assert len(starts) == 1, outputs  # one started it, the other waited for the lock and found it
    assert "engine started in" in starts[0]
    first = running_engine(EngineFiles(home))

    again = sql(home, "SELECT 'again' AS x")
    assert json.loads(again.stdout) == [{"x": "again"}] and again.stderr == ""  # nothing started, nothing said
    assert running_engine(EngineFiles(home)).pid == first.pid

    from warehouse.engine.client import busy_with

    assert busy_with(EngineFiles(home), settle_s=5) is None  # the heartbeat, a second behind, sees the clients gone
    status = run(home, "engine", "status").stdout
    assert f"pid            {first.pid}" in status and f"127.0.0.1:{first.port}" in status
    assert "0 client session(s), 0 operation(s), 0 Spark job(s)" in status
    # as Spark reports it: jobs of every client share the cores (Spark's own default pool would run them FIFO)
    assert "scheduling     FAIR, every client's jobs in the pool default (FAIR within)" in status


def test_the_token_is_private_and_a_wrong_or_missing_one_is_refused(home):
    files = EngineFiles(home)
    state = running_engine(files)
    assert files.token.stat().st_mode & 0o777 == 0o600
    assert files.log.stat().st_mode & 0o777 == 0o600  # a stream's Python worker writes its URL, token included, there
    token = files.read_token()
    assert len(token) >= 40
    for pid in engine_pids(home):  # command lines are public (ps): the token goes to the JVM by its environment
        try:
            command_line = " ".join(psutil.Process(pid).cmdline())
        except psutil.NoSuchProcess:  # a short-lived child that has exited (a zombie included) shows no command line
            continue
        assert token not in command_line
    for url in (state.url("not-the-token"), f"sc://127.0.0.1:{state.port}"):
        script = (f"from pyspark.sql import SparkSession\nSparkSession.builder.remote({url!r}).getOrCreate()"
                  ".sql('SELECT 1').collect()")  # fmt: skip
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and "UNAUTHENTICATED" in done.stderr, (url, done.stderr[-1500:])


def test_nothing_of_the_engine_listens_beyond_the_loopback(home):
    listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
                 and c.pid in engine_pids(home)]  # fmt: skip
    ports = {c.laddr.port for c in listening}
    assert running_engine(EngineFiles(home)).port in ports and len(ports) >= 3  # Connect, driver RPC, block manager
    assert {c.laddr.ip for c in listening} <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening


def test_a_remote_engine_is_used_as_named_and_one_that_does_not_answer_is_refused_at_once(home, tmp_path):
    """A profile's ``engine`` (or ``$FEATUREHOUSE_ENGINE_URL``, an Airflow task's): the command is its client and
    starts no engine of its own; one that does not answer is refused in seconds, not retried, and never started."""
    files = EngineFiles(home)
    state = running_engine(files)
    url = state.url(files.read_token())
    other = tmp_path / "other"
    profile = tmp_path / "remote.yaml"
    profile.write_text(json.dumps({"spark": {}, "engine": url}))
    answer = run(other, "sql", "--format", "json", "SELECT 'remote' AS x", "--profile", str(profile))
    assert json.loads(answer.stdout) == [{"x": "remote"}] and answer.stderr == ""
    env = {**os.environ, "FEATUREHOUSE_ENGINE_URL": url}
    by_env = subprocess.run([FEATUREHOUSE, "sql", "--format", "json", "SELECT 2 AS x", "--home", str(other)], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert by_env.returncode == 0 and json.loads(by_env.stdout) == [{"x": 2}], by_env.stderr[-2000:]
    assert not (other / "engine").exists() and running_engine(files).pid == state.pid
    # a client of other code (as after an upgrade on one side only) is refused, and the engine left as it is
    script = ("import sys\nimport warehouse.engine.client as client\nclient.code_version = lambda: '0.0.1+other'\n"
              "from warehouse import sql\nsys.exit(sql.main(['SELECT 1', '--home', sys.argv[1]]))")  # fmt: skip
    other_code = subprocess.run([sys.executable, "-c", script, str(other)], cwd=REPO, env=env, capture_output=True,
                                text=True, timeout=120)  # fmt: skip
    assert other_code.returncode == 2, other_code.stderr[-2000:]
    assert f"runs featurehouse {state.version} and this command is 0.0.1+other" in other_code.stderr
    assert running_engine(files).pid == state.pid

    (port,) = free_ports(1)
    profile.write_text(json.dumps({"spark": {}, "engine": f"sc://localhost:{port}/;token=secret-token"}))
    started = time.monotonic()
    dead = run(other, "sql", "SELECT 1", "--profile", str(profile), check=False)
    assert dead.returncode == 2 and time.monotonic() - started < 60
    assert f"error: the remote engine sc://localhost:{port} (the profile's `engine`, or $FEATUREHOUSE_ENGINE_URL) " \
           "does not answer (Connection refused)" in dead.stderr
    assert "secret-token" not in dead.stderr and not (other / "engine").exists()


def test_a_classic_session_beside_the_engine_and_a_static_setting_are_refused(home):
    off = run(home, "sql", "--engine", "off", "SELECT 1", check=False)
    assert off.returncode == 2
    assert "holds its embedded metastore" in off.stderr and "`featurehouse engine stop`" in off.stderr
    static = run(home, "sql", "--conf", "spark.driver.memory=9g", "SELECT 1", check=False)
    assert static.returncode == 2
    assert "error: --conf spark.driver.memory is a static Spark setting, fixed when the engine started; run " \
           "`featurehouse engine stop` and `featurehouse engine start --conf spark.driver.memory=...`" in static.stderr
    runtime = sql(home, "SELECT current_timezone() AS tz", "--conf", "spark.sql.session.timeZone=Asia/Tokyo")
    assert json.loads(runtime.stdout) == [{"tz": "Asia/Tokyo"}]  # a runtime setting holds for this command only
    assert json.loads(sql(home, "SELECT current_timezone() AS tz").stdout) == [{"tz": "UTC"}]


def test_concurrent_label_joins_on_the_engine_both_succeed_and_never_duplicate_rows(home):
    """Two clients' joins at once: on a table neither has created (a CREATE race), then the same day twice (a Delta
    conflict, which reaches the client over Spark Connect as Delta's own class and is retried)."""
    run(home, "generate", "--days", "4", "--impressions-per-day", "500", "--start", "2026-11-01")

    def joins(*days: str) -> list[subprocess.CompletedProcess[str]]:
        clients = [subprocess.Popen([FEATUREHOUSE, "label-join", "--dataset", "ads", "--ds", day, "--home", str(home)],
                                    cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for day in days]  # fmt: skip
        return [subprocess.CompletedProcess(c.args, c.wait(timeout=600), *c.communicate()) for c in clients]

    for done in joins("2026-11-01", "2026-11-02") + joins("2026-11-01", "2026-11-01"):
        assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(sql(home, "SELECT ds, count(*) AS n, count(DISTINCT impression_id) AS ids FROM "
                                  "featurehouse.ads GROUP BY ds ORDER BY ds").stdout)  # fmt: skip
    assert counts == [{"ds": "2026-11-01", "n": 500, "ids": 500}, {"ds": "2026-11-02", "n": 500, "ids": 500}]


def test_an_interrupted_client_stops_its_operations_and_publishes_whole_or_nothing(home):
    """Reruns of a day the concurrent joins published: SIGTERM at the gate, SIGINT mid-publish, and SIGKILL
    mid-publish (the engine closes the dead client's session, which interrupts what it left running)."""
    join = [FEATUREHOUSE, "label-join", "--dataset", "ads", "--ds", "2026-11-01", "--home", str(home)]
    files = EngineFiles(home)

    def version() -> int:
        return json.loads(sql(home, "DESCRIBE HISTORY featurehouse.ads LIMIT 1").stdout)[0]["version"]

    published = version()
    for signum, at in ((signal.SIGTERM, "validating the partition"), (signal.SIGINT, "publishing into"),
                       (signal.SIGKILL, "publishing into")):
        client = subprocess.Popen(join, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines = []
        for line in client.stderr:  # the join's progress lines, until the step to interrupt
            lines.append(line)
            if at in line:
                client.send_signal(signum)
                break
        err = "".join(lines) + client.stderr.read()
        if signum == signal.SIGKILL:
            assert client.wait(timeout=120) == -signal.SIGKILL, err[-3000:]
        else:
            assert client.wait(timeout=120) == 130, err[-3000:]
            assert "interrupted: stopping this command's operations on the engine" in err and "error: interrupted" in err
        deadline = time.monotonic() + 20  # a heartbeat or two; a dead client's session is closed by the engine
        while (beat := read_json(files.heartbeat))["operations"] or beat["jobs"] or beat["sessions"]:
            assert time.monotonic() < deadline, beat  # something of the client runs on
            time.sleep(0.5)
        now = version()
        assert now in (published, published + 1), (signum, published, now)
        rows = json.loads(sql(home, "SELECT count(*) AS n, count(DISTINCT impression_id) AS ids FROM featurehouse.ads "
                                    "WHERE ds = '2026-11-01'").stdout)  # fmt: skip
        assert rows == [{"n": 500, "ids": 500}]  # the previous copy or the whole new one, never part or both
        published = now


def test_an_engine_killed_mid_publish_leaves_the_table_whole_and_the_rerun_publishes_one_copy(home):
    """SIGKILL of the engine's whole process group as a client's join publishes: the client says so and exits 2 within
    seconds; the table holds its previous version or the whole new one; the rerun (a new engine) publishes one copy."""
    files = EngineFiles(home)

    def version() -> int:
        return json.loads(sql(home, "DESCRIBE HISTORY featurehouse.ads LIMIT 1").stdout)[0]["version"]

    def rows() -> list[dict]:
        return json.loads(sql(home, "SELECT count(*) AS n, count(DISTINCT impression_id) AS ids FROM featurehouse.ads "
                                    "WHERE ds = '2026-11-01'").stdout)  # fmt: skip

    published, engine = version(), running_engine(files)
    client = subprocess.Popen([FEATUREHOUSE, "label-join", "--dataset", "ads", "--ds", "2026-11-01", "--home", str(home)],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    lines = []
    for line in client.stderr:
        lines.append(line)
        if "publishing into" in line:
            os.killpg(engine.pid, signal.SIGKILL)
            break
    err = "".join(lines) + client.communicate(timeout=120)[1]  # in about 6 s, not after Connect's 10 minutes of retries
    assert client.returncode == 2, err[-3000:]
    assert f"the engine for {home} stopped while this command ran" in err, err[-3000:]
    now = version()  # a new engine
    assert now in (published, published + 1) and rows() == [{"n": 500, "ids": 500}], (published, now)
    run(home, "label-join", "--dataset", "ads", "--ds", "2026-11-01")
    assert version() == now + 1 and rows() == [{"n": 500, "ids": 500}]  # one copy, whole


def test_a_dead_clients_session_is_closed(home):
    script = ("import sys, time\nfrom pathlib import Path\nfrom warehouse.engine.client import engine_session\n"
              f"with engine_session(Path({str(home)!r}), {{}}) as s:\n"
              "    s.sql('SELECT 1').collect(); print('ready', flush=True); time.sleep(300)\n")  # fmt: skip
    client = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert client.stdout.readline().strip() == "ready"
    files = EngineFiles(home)
    time.sleep(1.5)  # a heartbeat
    assert read_json(files.heartbeat)["sessions"] == 1
    client.kill()
    client.wait()
    deadline = time.monotonic() + 20
    while read_json(files.heartbeat)["sessions"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert read_json(files.heartbeat)["sessions"] == 0
    assert f"client pid {client.pid} is gone; closed its session" in files.log.read_text()


def test_new_code_restarts_an_idle_engine_and_leaves_a_busy_one(home):
    files = EngineFiles(home)
    old = running_engine(files)
    state = read_json(files.state)
    write_json(files.state, {**state, "version": "0.0.1+old"})  # as if the code changed since it started

    script = ("import time\nfrom pathlib import Path\nfrom warehouse.engine.client import connect\n"
              f"s = connect({old.url(files.read_token())!r}); s.sql('SELECT 1').collect(); print('ready', flush=True)\n"
              "time.sleep(300)\n")  # fmt: skip
    holder = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        time.sleep(1.5)
        busy = run(home, "sql", "SELECT 1", check=False)
        assert busy.returncode == 2, busy.stderr
        assert "runs other code (0.0.1+old" in busy.stderr and "is in use (1 client session(s)" in busy.stderr
        assert running_engine(files).pid == old.pid  # left running
    finally:
        holder.kill()
        holder.wait()
    time.sleep(3)  # the engine closes the dead holder's session
    restarted = sql(home, "SELECT 1 AS x")
    assert "runs other code (0.0.1+old); restarting it for" in restarted.stderr
    assert running_engine(files).pid != old.pid and not psutil.pid_exists(old.pid)


def test_a_killed_engine_is_replaced_by_the_next_command(home):
    files = EngineFiles(home)
    old = running_engine(files)
    os.killpg(old.pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while old.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    replaced = sql(home, "SELECT 1 AS x")
    assert f"the engine for {home} (pid {old.pid}) is gone; starting a new one" in replaced.stderr
    assert json.loads(replaced.stdout) == [{"x": 1}]


def test_a_classic_session_once_the_engine_is_stopped_listens_on_the_loopback(home):
    files = EngineFiles(home)
    engine = running_engine(files)
    assert f"stopped the engine for {home} (pid {engine.pid})" in run(home, "engine", "stop").stdout
    diff = [FEATUREHOUSE, "features", "diff", "--dataset", "ads", "--home", str(home), "--engine", "off"]
    command = subprocess.Popen(diff, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[tuple[str, int]] = set()
    while command.poll() is None:  # the classic session's sockets while its JVM runs
        try:
            jvms = {c.pid for c in psutil.Process(command.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            break
        seen |= {(c.laddr.ip, c.laddr.port) for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in jvms}  # fmt: skip
        time.sleep(0.1)
    out, err = command.communicate()
    assert command.returncode == 0, err
    assert "features diff ads" in out
    assert not engine.alive() and running_engine(files) is None
    assert len({port for _, port in seen}) >= 2, seen  # its driver RPC and block manager at least
    assert {ip for ip, _ in seen} <= {"127.0.0.1", "::ffff:127.0.0.1"}, seen


def test_the_idle_engine_stops_itself(home):
    assert "no engine runs for" in run(home, "engine", "status").stdout
    started = run(home, "engine", "start", "--idle-stop-minutes", "0.05").stdout
    assert "started in" in started and "of 3 s before it stops itself" in started
    files = EngineFiles(home)
    pid = running_engine(files).pid
    deadline = time.monotonic() + 60
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not psutil.pid_exists(pid) and not files.state.exists()
    assert "featurehouse engine: idle for 0.05 min, stopping" in files.log.read_text()
