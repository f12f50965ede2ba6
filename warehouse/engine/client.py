"""A command's side of the engine: find the home's engine (start it, or restart it for new code), and connect.

The first command that needs an engine and finds none starts one in the background and says so on
stderr; later commands reuse it. A lock under ``<home>/engine/`` makes two commands that find none
at once start one engine, not two. An engine of other code (``state.code_version``) is restarted
only when nothing runs on it; otherwise the command refuses, saying what to do. A dead engine is
replaced by the next command.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

from schemas.errors import ConfigError, FeaturehouseError
from schemas.paths import REPO_ROOT
from warehouse.spark_jobs import ENGINE_UI
from warehouse.engine.state import (CLIENT_PREFIX, ENGINE_VERSION, SERVER_MODULE, EngineFiles, EngineState,
                                    code_version, read_json, read_state)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: How long a start may take: a JVM with Delta and Hive, 10-25 s on this machine, more beside other work.
START_TIMEOUT_S = 180.0
#: How long a stop waits for Spark to stop before the engine's process group is killed.
STOP_TIMEOUT_S = 60.0
#: A token in a Connect URL quoted by an error message.
TOKEN_IN_TEXT = re.compile(r"token=[^;\s\]]+")
#: Spark Connect's port where an ``sc://`` URL names none.
DEFAULT_CONNECT_PORT = 15002
#: How long a command waits for a busy engine to become idle before it leaves it running and refuses.
SETTLE_S = 3.0
#: How a client of the home's engine retries a call the engine does not answer: about 6 s in all. Spark Connect's
#: own policy retries for at least 10 minutes, for a network between them; a local engine that does not answer is
#: gone (killed, or stopped), which the command then says (:func:`engine_session`).
LOCAL_RETRIES = {"max_retries": 5, "initial_backoff": 100, "max_backoff": 2000}


def say(message: str) -> None:
    print(f"featurehouse: {message}", file=sys.stderr, flush=True)


@contextmanager
def engine_lock(files: EngineFiles) -> Iterator[None]:
    """Held while the engine is started, stopped or replaced (an OS lock: released if the holder dies)."""
    files.folder.mkdir(parents=True, exist_ok=True)
    with files.lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def running_engine(files: EngineFiles) -> EngineState | None:
    """The home's engine if its process runs, else None."""
    state = read_state(files)
    return state if state is not None and state.alive() else None


def busy_with(files: EngineFiles, *, settle_s: float = SETTLE_S) -> str | None:
    """What uses the engine (its heartbeat): open client sessions, operations, Spark jobs; None when nothing.

    Waits up to ``settle_s`` for it to end: the heartbeat is a second old, and may still count a command that has
    just finished.
    """
    deadline = time.monotonic() + settle_s
    while True:
        beat = read_json(files.heartbeat) or {}
        counts = {what: beat.get(what, 0) for what in ("sessions", "operations", "jobs")}
        if not any(counts.values()):
            return None
        if time.monotonic() >= deadline:
            return (f"{counts['sessions']} client session(s), {counts['operations']} operation(s), "
                    f"{counts['jobs']} Spark job(s)")  # fmt: skip
        time.sleep(0.25)


def start_engine(files: EngineFiles, *, idle_stop_minutes: float | None = None,
                 confs: Sequence[str] = ()) -> EngineState:  # fmt: skip
    """Start the home's engine in the background and wait until it listens; call with :func:`engine_lock` held."""
    files.new_token()
    files.state.unlink(missing_ok=True)
    command = [sys.executable, "-m", SERVER_MODULE, "--home", str(files.home)]
    if idle_stop_minutes is not None:
        command += ["--idle-stop-minutes", str(idle_stop_minutes)]
    for pair in confs:
        command += ["--conf", pair]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY_")}
    started = time.monotonic()
    # 0600, as the token: a stream's foreachBatch worker (pyspark's code) prints its Connect URL, token included
    descriptor = os.open(files.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(descriptor, 0o600)  # a log of a version before this one
    with os.fdopen(descriptor, "ab") as log:
        log.write(f"\n--- started by pid {os.getpid()} at {time.ctime()}\n".encode())
        log.flush()
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   cwd=REPO_ROOT, env=env, start_new_session=True)  # fmt: skip
    while time.monotonic() - started < START_TIMEOUT_S:
        state = read_state(files)
        if state is not None and state.pid == process.pid:
            return state
        if process.poll() is not None:
            raise FeaturehouseError(f"the engine for {files.home} did not start (exit {process.returncode}); "
                                    f"the end of its log:\n{log_tail(files, 15)}")  # fmt: skip
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    raise FeaturehouseError(f"the engine for {files.home} did not start in {START_TIMEOUT_S:.0f} s; see {files.log}")


def stop_engine(files: EngineFiles, state: EngineState) -> None:
    """Stop the engine (SIGTERM: Spark stops; after ``STOP_TIMEOUT_S`` its process group is killed).

    It returns once the engine's JVM is gone too, not only its Python process: until then the JVM may still hold
    the embedded metastore's lock, which a classic session opened next (spark-submit's, which starts its JVM
    before any check of ours) would fail on."""
    import psutil

    try:
        processes = [psutil.Process(state.pid)]
        processes += processes[0].children(recursive=True)
        os.kill(state.pid, signal.SIGTERM)
    except (ProcessLookupError, psutil.NoSuchProcess):
        files.state.unlink(missing_ok=True)
        return
    _, alive = psutil.wait_procs(processes, timeout=STOP_TIMEOUT_S)
    if alive:
        with suppress(ProcessLookupError):
            os.killpg(state.pid, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=10)
    files.state.unlink(missing_ok=True)


def log_tail(files: EngineFiles, lines: int) -> str:
    try:
        return "\n".join(files.log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def ensure_engine(files: EngineFiles) -> EngineState:
    """The home's engine of this code, started or replaced if need be."""
    state = running_engine(files)
    if state is not None and state.version == code_version():
        return state
    with engine_lock(files):
        state = read_state(files)
        if state is not None and not state.alive():
            say(f"the engine for {files.home} (pid {state.pid}) is gone; starting a new one")
        elif state is not None and state.version != code_version():
            busy = busy_with(files)
            if busy:
                raise ConfigError(
                    f"the engine for {files.home} runs other code ({state.version}; this command is "
                    f"{code_version()}) and is in use ({busy}), so it is left running: wait for that work to end, "
                    "then run `featurehouse engine stop`; or pass --engine off for a session of this command's own "
                    "once the engine is stopped"
                )
            say(f"the engine for {files.home} runs other code ({state.version}); restarting it for {code_version()}")
            stop_engine(files, state)
        elif state is not None:
            return state  # another command started it while this one waited for the lock
        say(f"starting the engine for {files.home} in the background (a resident Spark session; "
            "`featurehouse engine status|stop`)")  # fmt: skip
        started = time.monotonic()
        state = start_engine(files)
        say(f"engine started in {time.monotonic() - started:.1f} s (pid {state.pid}, 127.0.0.1:{state.port})")
        return state


def connect(url: str) -> SparkSession:
    """A Connect session whose user id names this process (``featurehouse-<pid>``): the engine closes the sessions
    of clients that died (``server.Heart``)."""
    from pyspark.sql import SparkSession

    separator = ";" if "/;" in url else "/;"
    # spark-submit exports MASTER to the Python it runs, and to that process's children (a stream's publish step):
    # pyspark refuses a remote session beside it, though a client has no master of its own
    os.environ.pop("MASTER", None)
    try:
        return SparkSession.builder.remote(f"{url}{separator}user_id={CLIENT_PREFIX}-{os.getpid()}").getOrCreate()
    except Exception as err:  # pyspark's messages quote the whole URL, token included
        message = TOKEN_IN_TEXT.sub("token=(hidden)", str(err))
        raise ConfigError(f"cannot open a session on the engine {address(url)}: {message}") from None


def address(url: str) -> str:
    """A Connect URL without its parameters (``/;token=...;user_id=...``): what messages may show."""
    return url.split("/;", 1)[0]


def check_answers(url: str, timeout_s: float = 5.0) -> None:
    """A remote engine's port accepts a connection, or a ConfigError naming it (the token left out): Spark Connect's
    client would otherwise retry an engine that is not there for minutes. A client never starts a remote engine."""
    from urllib.parse import urlsplit

    where = urlsplit(address(url))
    host, port = where.hostname or "", where.port or DEFAULT_CONNECT_PORT
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as err:
        raise ConfigError(
            f"the remote engine sc://{host}:{port} (the profile's `engine`, or $FEATUREHOUSE_ENGINE_URL) does not "
            f"answer ({err.strerror or err}); start it there (it is never started or restarted from here), or drop "
            "`engine` from the profile to use this data folder's own engine"
        ) from err


def check_remote_version(spark: SparkSession, url: str) -> None:
    """A remote featurehouse engine of other code is refused (never restarted from here). A Connect server that is
    no featurehouse engine says no version, and is used as it is."""
    theirs = spark.conf.get(ENGINE_VERSION, None)
    if theirs is not None and theirs != code_version():
        spark.stop()
        raise ConfigError(
            f"the remote engine {address(url)} runs featurehouse {theirs} and this command is {code_version()}: "
            "a client and an engine of different code do not talk; install the same version on both sides, or "
            "restart that engine with this code (never done from here)"
        )


def apply_settings(spark: SparkSession, confs: Mapping[str, str]) -> None:
    """A command's ``--conf`` settings on its own Connect session; a static one is refused, naming the restart."""
    for key, value in confs.items():
        if not spark.conf.isModifiable(key) and spark.conf.get(key, None) != value:
            raise ConfigError(
                f"--conf {key} is a static Spark setting, fixed when the engine started; run `featurehouse engine "
                f"stop` and `featurehouse engine start --conf {key}=...` to start one with it, or pass --engine off "
                "for a session of this command's own"
            )
        spark.conf.set(key, value)


@contextmanager
def engine_session(home: Path, confs: Mapping[str, str], *, remote: str | None = None) -> Iterator[SparkSession]:
    """A Spark Connect session on the home's engine (or on ``remote``, a profile's ``sc://`` engine), released on exit."""
    if remote is not None:
        check_answers(remote)
        spark = connect(remote)
        check_remote_version(spark, remote)
    else:
        from pyspark.sql.connect.client.retries import DefaultPolicy

        files = EngineFiles(Path(home))
        state = ensure_engine(files)
        spark = connect(state.url(files.read_token()))
        spark.client.set_retry_policies([DefaultPolicy(**LOCAL_RETRIES)])
        if state.ui:
            spark.conf.set(ENGINE_UI, state.ui)  # where this session's jobs are counted (warehouse.spark_jobs)
    try:
        with terminate_as_interrupt():
            apply_settings(spark, confs)
            yield spark
    except KeyboardInterrupt:
        say("interrupted: stopping this command's operations on the engine")
        spark.interruptAll()  # this session's operations only; a publish is one Delta commit, so none is half-done
        raise
    except Exception as err:
        if remote is None and not state.alive():
            raise FeaturehouseError(
                f"the engine for {home} stopped while this command ran (its log: {files.log}); nothing is "
                "half-published (one Delta commit each). Run the command again: it starts a new engine, and a stream "
                "resumes from its checkpoint"
            ) from err
        raise
    finally:
        if remote is not None or state.alive():
            spark.stop()  # releases the session (the engine closes it, interrupting whatever still runs)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while the block runs (as Ctrl-C does), so that a terminated client stops
    its own operations on the engine before it exits. Only in the main thread, where Python handles signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def make_way(files: EngineFiles, *, chosen_off: bool) -> None:
    """Before a classic session on the embedded metastore of ``files.home``: no engine may hold it.

    ``chosen_off`` (``--engine off``): a running engine is refused, naming ``featurehouse engine stop``. A command
    that is not yet an engine client stops an idle engine (saying so) and is refused beside a busy one.
    """
    state = running_engine(files)
    if state is None:
        return
    busy = busy_with(files)
    if chosen_off or busy:
        raise ConfigError(
            f"the engine for {files.home} runs (pid {state.pid}, since {state.started_at}"
            + (f"; {busy}" if busy else "") + ") and holds its embedded metastore, which admits one JVM; "
            + ("run this command without --engine off to use the engine, or " if chosen_off else "wait for its work "
               "to end, or ") + "run `featurehouse engine stop` first"
        )
    with engine_lock(files):
        say(f"stopping the idle engine for {files.home} (pid {state.pid}): this command runs a Spark session of its own")
        stop_engine(files, state)
