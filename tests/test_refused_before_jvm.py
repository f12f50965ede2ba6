"""Inputs the local files already show to be wrong are refused before any JVM starts: each command runs with a
stub ``java`` first on PATH (and no JAVA_HOME) that leaves a marker file, so a JVM start, however short, leaves
a trace that sampling processes could miss."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SMALL_REGISTRY, close_partition, write_landing

REPO = Path(__file__).resolve().parent.parent
FEATUREHOUSE = str(Path(sys.executable).parent / "featurehouse")
DS = "2026-11-01"


@pytest.fixture
def stub_java(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose ``java`` is a stub that touches a marker file and fails."""
    folder = tmp_path / "stub-bin"
    folder.mkdir()
    marker = tmp_path / "java-was-started"
    java = folder / "java"
    java.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    java.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env["PATH"] = f"{folder}{os.pathsep}{env.get('PATH', '')}"
    return env, marker


@pytest.fixture
def home(tmp_path: Path) -> tuple[Path, Path]:
    """A data folder, and a registry folder with one dataset ``ads``."""
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "ads.yaml").write_text(SMALL_REGISTRY.format(dataset="ads"))
    return tmp_path / "home", registry


def featurehouse(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FEATUREHOUSE, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip


def test_the_stub_java_leaves_its_marker_when_a_session_starts(stub_java, home):
    """The control: a command that needs a JVM does start the stub (and fails without a real one)."""
    env, marker = stub_java
    data, registry = home
    done = featurehouse(env, "sql", "SELECT 1", "--home", str(data), "--registry-dir", str(registry))
    assert done.returncode != 0
    assert marker.exists(), done.stderr[-2000:]


@pytest.mark.parametrize("args, error", [
    (["label-join", "--dataset", "nope", "--ds", DS],
     r"error: no registry for dataset 'nope': .*nope\.yaml does not exist; known datasets: ads"),
    (["label-join", "--dataset", "ads", "--ds", "2026-13-01"], r"error: .*2026-13-01"),
    (["label-join", "--dataset", "ads", "--ds", DS],
     rf"error: impression partition .*impressions/ds={DS} does not exist; generate or land the logs of {DS} first"),
    (["catalog", "stats", "--dataset", "nope", "--ds", DS], r"error: no registry for dataset 'nope'"),
    (["import", "criteo", "--dataset", "criteo_t", "--ds", DS, "missing.txt"],
     r"error: missing\.txt: no such file; give the path of a Criteo file"),
])  # fmt: skip
def test_a_bad_input_is_refused_before_a_jvm_starts(stub_java, home, args, error):
    env, marker = stub_java
    data, registry = home
    done = featurehouse(env, *args, "--home", str(data), "--registry-dir", str(registry))
    assert done.returncode == 2, done.stderr[-2000:]
    assert re.search(error, done.stderr), done.stderr[-2000:]
    assert not marker.exists()


def test_open_label_windows_are_refused_before_a_jvm_starts(stub_java, home):
    """The impressions are closed, the next day's labels are not: refused, naming the flag that allows it."""
    env, marker = stub_java
    data, registry = home
    write_landing(data / "landing", "impressions", DS, [{"impression_id": "a"}])
    close_partition(data / "landing", "labels", DS)
    done = featurehouse(env, "label-join", "--dataset", "ads", "--ds", DS, "--home", str(data),
                        "--registry-dir", str(registry))  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "are not closed yet" in done.stderr and "--allow-open-window" in done.stderr, done.stderr[-2000:]
    assert not marker.exists()
