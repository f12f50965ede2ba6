"""The embedded Derby metastore admits one JVM: a second one is refused with a clear message, not a Java trace.

The checks run in fresh processes, as a user's second command would: the test process has a JVM of its own,
and the check stands aside in a process that has one (Derby's lock would be its own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from pathlib import Path
from warehouse.session import spark_session
with spark_session(Path(sys.argv[1])) as spark:
    spark.sql("SHOW DATABASES").collect()
    print("holding", flush=True)
    time.sleep(300)
"""
CHECK = """
import sys
from pathlib import Path
from warehouse.confs import session_confs
from warehouse.session import check_metastore_free
home = Path(sys.argv[1])
check_metastore_free(home, session_confs(home, dict(a.split("=", 1) for a in sys.argv[2:])))
"""


def check(home: Path, *conf: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHECK, str(home), *conf], cwd=REPO, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


@pytest.mark.slow
def test_a_metastore_held_by_another_jvm_is_refused_naming_the_fixes(tmp_path):
    home = tmp_path / "home"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(home)], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "holding"
        refused = subprocess.run([sys.executable, "-m", "featurehouse.cli", "sql", "--home", str(home), "--engine", "off",
                                  "SELECT 1"], cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines() == [
            f"error: the embedded metastore {home / 'metastore_db'} is in use by another Spark application: embedded "
            "Derby admits one JVM at a time; wait for that job to finish, give this one its own --home, or point "
            "every job at a shared metastore (--conf spark.hadoop.javax.jdo.option.ConnectionURL=..., see the README)"
        ]
        shared = check(home, "spark.hadoop.javax.jdo.option.ConnectionURL=jdbc:postgresql://db/metastore")
        assert shared.returncode == 0, shared.stderr  # a shared metastore is not Derby's business
        # a command started while the holder's JVM is still exiting (a script's next line) waits for the lock
        waiting = subprocess.Popen([sys.executable, "-c", CHECK, str(home)], cwd=REPO, stderr=subprocess.PIPE, text=True)
        time.sleep(2)
        os.killpg(holder.pid, signal.SIGKILL)
        assert waiting.wait(timeout=60) == 0, waiting.stderr.read()
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # the Python process and its JVM
        holder.wait()
    for _ in range(20):  # the lock goes with its JVM, once the kernel has reaped it
        if check(home).returncode == 0:
            break
        time.sleep(0.5)
    else:
        pytest.fail("the metastore lock outlived the JVM that held it")


def test_a_postgres_metastore_puts_its_jdbc_driver_on_the_driver_classpath(tmp_path):
    from warehouse.confs import session_confs

    url = "jdbc:postgresql://127.0.0.1:5433/featurehouse_metastore"
    confs = session_confs(tmp_path, {"spark.hadoop.javax.jdo.option.ConnectionURL": url,
                                     "spark.driver.extraClassPath": "/opt/mine.jar"})  # fmt: skip
    path = confs["spark.driver.extraClassPath"].split(os.pathsep)
    assert path[0] == "/opt/mine.jar" and len(path) == 2 and Path(path[1]).name.startswith("postgresql-")
    assert "spark.driver.extraClassPath" not in session_confs(tmp_path)  # embedded Derby needs nothing there


def test_driver_options_merge_the_users_with_derbys_home_and_the_class_data_archive(tmp_path, monkeypatch):
    """A user's spark.driver.extraJavaOptions joins the embedded one (Derby's home), last so that it wins; the
    class-data archive is one word in spark.driver.defaultJavaOptions, named only for the classpath it was made
    for, and spark-args prints it as a --conf that passes through $(...)."""
    from warehouse import cds
    from warehouse.confs import DEFAULT_JAVA_OPTIONS, JAVA_OPTIONS, delta_jars, session_confs, spark_submit_args

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv(cds.SWITCH, raising=False)
    monkeypatch.setattr(cds, "ARCHIVE_DIR", tmp_path / "cds")
    home = tmp_path / "home"
    derby = f"-Dderby.system.home={home.resolve()}"
    user = {JAVA_OPTIONS: "-Dfoo=1 -Xss4m"}

    confs = session_confs(home, user)
    assert confs[JAVA_OPTIONS] == f"{derby} -Dfoo=1 -Xss4m" and DEFAULT_JAVA_OPTIONS not in confs  # no archive yet
    archive = cds.archive_path(",".join(delta_jars()))
    archive.parent.mkdir()
    archive.write_bytes(b"")
    assert DEFAULT_JAVA_OPTIONS not in session_confs(home, user)  # an archive without its options file
    archive.with_suffix(".options").write_text(cds._USE.format(path=archive))
    confs = session_confs(home, user)
    assert confs[JAVA_OPTIONS] == f"{derby} -Dfoo=1 -Xss4m"
    assert confs[DEFAULT_JAVA_OPTIONS] == f"-XX:VMOptionsFile={archive.with_suffix('.options')}"
    args = spark_submit_args(home, {})
    assert args[args.index("--driver-java-options") + 1] == derby
    assert f"{DEFAULT_JAVA_OPTIONS}=-XX:VMOptionsFile={archive.with_suffix('.options')}" in args

    other_jars = session_confs(home, {**user, "spark.jars": "/elsewhere/hadoop-aws.jar"})  # another classpath
    assert DEFAULT_JAVA_OPTIONS not in other_jars
    monkeypatch.setenv(cds.SWITCH, "off")
    assert DEFAULT_JAVA_OPTIONS not in session_confs(home, user)
