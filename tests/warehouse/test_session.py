"""The embedded Derby metastore admits one JVM: a second one is refused with a clear message, not a Java trace."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schemas.errors import ConfigError
from warehouse.session import check_metastore_free, session_confs

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


@pytest.mark.slow
def test_a_metastore_held_by_another_jvm_is_refused_naming_the_fixes(tmp_path):
    home = tmp_path / "home"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(home)], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(ConfigError, match=r"the embedded metastore .*metastore_db is in use by another Spark "
                                              r"application: embedded Derby admits one JVM at a time; wait for"):
            check_metastore_free(home, session_confs(home))
        other = {"spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:postgresql://db/metastore"}
        check_metastore_free(home, session_confs(home, other))  # a shared metastore is not Derby's business
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # the Python process and its JVM
        holder.wait()
    for _ in range(50):  # the lock goes with its JVM, once the kernel has reaped it
        try:
            check_metastore_free(home, session_confs(home))
            break
        except ConfigError:
            time.sleep(0.2)
    else:
        pytest.fail("the metastore lock outlived the JVM that held it")
