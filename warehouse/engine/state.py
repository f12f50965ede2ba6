"""The engine's files under ``<home>/engine/``, and the version a client and an engine must share.

* ``token``: the bearer token clients present (mode 0600, written before the engine starts);
* ``state.json``: pid, port, versions, settings, written by the engine once it listens;
* ``heartbeat.json``: written by the engine every second: how many operations and Spark jobs run,
  and since when it is idle (what ``status`` shows and what a restart for a new version checks);
* ``lock``: held while a client starts or restarts the engine, so two commands start one engine;
* ``engine.log``: the engine's stdout and stderr.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import json
import os
import secrets
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import psutil

from schemas.paths import REPO_ROOT

#: The packages whose code runs in the engine (its confs, and ``foreachBatch`` functions its Python workers run).
ENGINE_PACKAGES = ("etl", "warehouse", "schemas", "ingest", "featurehouse")
#: The module the engine's process runs: how its pid is recognised as an engine's.
SERVER_MODULE = "warehouse.engine.server"
#: The environment variable that tells a session it runs inside the engine (the one classic session allowed beside it).
INSIDE_ENGINE = "FEATUREHOUSE_ENGINE_PROCESS"
#: The engine's setting that holds its code version (:func:`code_version`), readable by any client.
ENGINE_VERSION = "featurehouse.engine.version"
#: A featurehouse client's Connect user id is this and its pid (``featurehouse-1234``).
CLIENT_PREFIX = "featurehouse"


@cache
def code_version() -> str:
    """The project's version and a hash of its code: a client talks only to an engine of the same."""
    digest = hashlib.sha256()
    for package in ENGINE_PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            digest.update(path.relative_to(REPO_ROOT).as_posix().encode())
            digest.update(path.read_bytes())
    return f"{importlib.metadata.version('featurehouse')}+{digest.hexdigest()[:12]}"


@dataclass(frozen=True)
class EngineFiles:
    home: Path

    @property
    def folder(self) -> Path:
        return Path(self.home) / "engine"

    @property
    def token(self) -> Path:
        return self.folder / "token"

    @property
    def state(self) -> Path:
        return self.folder / "state.json"

    @property
    def heartbeat(self) -> Path:
        return self.folder / "heartbeat.json"

    @property
    def lock(self) -> Path:
        return self.folder / "lock"

    @property
    def log(self) -> Path:
        return self.folder / "engine.log"

    def new_token(self) -> str:
        """A fresh token in a file only this user can read (created 0600, never widened)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        token = secrets.token_urlsafe(32)
        self.token.unlink(missing_ok=True)
        fd = os.open(self.token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token)
        return token

    def read_token(self) -> str:
        return self.token.read_text().strip()


@dataclass(frozen=True)
class EngineState:
    """What the engine writes once it listens."""

    pid: int
    port: int
    started_at: str
    version: str
    pyspark: str
    python: str
    idle_stop_s: float
    driver_memory: str
    settings: dict[str, str]
    ui: str = ""  # the engine's Spark UI (and its REST API), on the loopback; "" when off
    scheduling: str = ""  # the scheduler's mode and the default pool's, as Spark reports them

    def url(self, token: str | None = None) -> str:
        # "localhost", not 127.0.0.1: pyspark sends a token without TLS only over gRPC's local credentials, which
        # it uses for that host name alone; the engine listens on 127.0.0.1
        return f"sc://localhost:{self.port}" + (f"/;token={token}" if token else "")

    def alive(self) -> bool:
        """The pid runs, and it is an engine's (a pid reused by another process is not)."""
        try:
            return SERVER_MODULE in " ".join(psutil.Process(self.pid).cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return False


def write_json(path: Path, value: dict[str, Any]) -> None:
    """Replace ``path`` whole (a reader sees the old file or the new one, never part)."""
    scratch = path.with_suffix(f".{os.getpid()}.tmp")
    scratch.write_text(json.dumps(value, indent=1) + "\n")
    scratch.replace(path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def read_state(files: EngineFiles) -> EngineState | None:
    raw = read_json(files.state)
    return EngineState(**raw) if raw else None


def write_state(files: EngineFiles, state: EngineState) -> None:
    write_json(files.state, asdict(state))


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
