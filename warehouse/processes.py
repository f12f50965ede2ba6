"""Local service processes: finding ``java``, ports, a log's tail, waiting for a start, and stopping.

What the local Kafka broker (``etl/kafka/broker.py``) and the cluster's services
(``featurehouse/cluster.py``) both need of the processes they start. The polls are
tenacity's: a fixed pause between checks, up to a deadline.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable
from contextlib import ExitStack, suppress
from pathlib import Path

from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from schemas.errors import ConfigError, FeaturehouseError

HOST = "127.0.0.1"


def java(needed_by: str) -> str:
    """The java executable: ``$JAVA_HOME/bin/java``, else the one on PATH. ``needed_by`` names who needs it."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not os.access(found, os.X_OK):
        raise ConfigError(f"no java found ({'JAVA_HOME=' + home if home else 'none on PATH'}); {needed_by} needs "
                          "Java 17 or later: install a JDK (e.g. apt-get install openjdk-17-jre-headless), set "
                          "JAVA_HOME or put java on PATH")  # fmt: skip
    return found


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at ``host:port`` (within half a second)."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def free_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct ports free on ``host`` now (all bound at once, then released)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in socks]


def tail(log: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of ``log``; ``(empty)`` when it is empty, missing or unreadable."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        text = ""
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


def poll_until(condition: Callable[[], bool], *, timeout_s: float, interval_s: float) -> bool:
    """Check ``condition`` every ``interval_s`` until it holds (True) or ``timeout_s`` has passed (False)."""
    return Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(interval_s),
                    retry=retry_if_result(lambda held: not held),
                    retry_error_callback=lambda _state: False)(condition)  # fmt: skip


def wait_until_ready(what: str, ready: Callable[[], bool], process: subprocess.Popen, log: Path, *,
                     timeout_s: float, interval_s: float, tail_lines: int = 30,
                     error: type[FeaturehouseError] = FeaturehouseError) -> None:  # fmt: skip
    """Poll ``ready`` until it holds. ``process`` exiting first, or ``timeout_s`` passing, raises ``error``
    naming ``what`` and ``log``, with the log's last lines."""

    def check() -> bool:
        if ready():
            return True
        if process.poll() is not None:
            raise error(f"{what} exited with status {process.returncode} while starting; its log: {log}\n"
                        f"{tail(log, tail_lines)}")  # fmt: skip
        return False

    if not poll_until(check, timeout_s=timeout_s, interval_s=interval_s):
        raise error(f"{what} did not come up within {timeout_s:g}s; its log: {log}\n{tail(log, tail_lines)}")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a child of this process that has exited is reaped here)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False  # our child, and it has exited
    except ChildProcessError:
        pass  # not our child (started by another process)
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def stop(process: subprocess.Popen | int, *, timeout_s: float, group: bool = False, interval_s: float = 0.2) -> None:
    """SIGTERM (a controlled shutdown), then SIGKILL if it still runs after ``timeout_s``.

    ``process``: a child (reaped after it ends) or a pid; ``group``: signal its whole process
    group (a process started in a session of its own, with its children).
    """
    child = process if isinstance(process, subprocess.Popen) else None
    pid = process.pid if child is not None else process

    def send(sig: signal.Signals) -> None:
        with suppress(ProcessLookupError):  # it ended in between
            os.killpg(pid, sig) if group else os.kill(pid, sig)

    if child is not None:
        if child.poll() is not None:
            return
        send(signal.SIGTERM)
        try:
            child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            send(signal.SIGKILL)
            child.wait()
    elif pid_alive(pid):
        send(signal.SIGTERM)
        if not poll_until(lambda: not pid_alive(pid), timeout_s=timeout_s, interval_s=interval_s):
            send(signal.SIGKILL)
