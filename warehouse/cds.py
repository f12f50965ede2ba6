"""A class-data-sharing archive (AppCDS) for the driver JVM: made once by the install step, used by every
session whose classpath it was made for.

A Spark driver with Delta and the Hive metastore loads and verifies some 20,000 classes at start-up. The JVM can
dump the classes a run loaded into an archive (``-XX:ArchiveClassesAtExit``) and map them at the next start
(``-XX:SharedArchiveFile``) instead of parsing and verifying them again. An archive holds only for the JVM and the
classpath it was made with, so its file name carries a key of both (the java binary, pyspark's jars, the
``spark.jars`` of the session): a session with other jars (the S3A connector, a cluster's) finds no archive of its
key and starts as before. The JVM itself checks the archive once more and ignores one that no longer matches
(``-Xshare:auto``), so a stale archive costs nothing but its benefit.

    python -m warehouse.cds            # make the archive of the embedded default (make install runs this)
    FEATUREHOUSE_CDS=off featurehouse sql "SELECT 1"     # a start without it
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from schemas.errors import ConfigError
from schemas.paths import REPO_ROOT
from warehouse.processes import java

ARCHIVE_DIR = REPO_ROOT / ".jvm" / "cds"
#: The options that map an archive; the log options keep the JVM quiet about one that no longer matches.
_USE = "-XX:SharedArchiveFile={path} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off -Xlog:class+path=off"
#: ``FEATUREHOUSE_CDS=off``: start the driver without the archive (as before it existed).
SWITCH = "FEATUREHOUSE_CDS"
#: Set in the JVM the archive is made in: it must not map an older archive while it dumps a new one.
_MAKING = "FEATUREHOUSE_CDS_MAKING"


def archive_path(jars: str) -> Path:
    """Where the archive of this JVM, pyspark's jars and the session's ``spark.jars`` (comma-separated) lives."""
    import pyspark

    spark_jars = Path(pyspark.__file__).parent / "jars"
    classpath = sorted(f"{p.name}:{p.stat().st_size}" for p in spark_jars.glob("*.jar"))
    try:
        jvm = os.path.realpath(java("a Spark session"))
    except ConfigError:
        jvm = ""  # no JVM, so no archive of one; the session itself names the fix
    key = hashlib.sha256("\n".join([jvm, pyspark.__version__, *classpath, jars]).encode()).hexdigest()[:16]
    return ARCHIVE_DIR / f"driver-{key}.jsa"


def java_options(confs: Mapping[str, str]) -> str | None:
    """The one driver option that maps the archive made for these session confs (``-XX:VMOptionsFile`` naming
    the archive's options file: one word, so it passes through ``$(featurehouse spark-args)``), or None."""
    if os.environ.get(_MAKING) or os.environ.get(SWITCH) == "off" or confs.get("spark.driver.extraClassPath"):
        return None  # dumping now; switched off; or a classpath the archive was not made with (a JDBC driver's)
    path = archive_path(confs.get("spark.jars", ""))
    options = path.with_suffix(".options")
    return f"-XX:VMOptionsFile={options}" if path.is_file() and options.is_file() else None


def merge_java_options(*options: str | None) -> str:
    """Driver options joined in order (a later ``-D`` or ``-XX`` of the same name wins in the JVM)."""
    return " ".join(o.strip() for o in options if o and o.strip())


def _workload() -> None:
    """What the archive should hold: a session with the metastore, a Delta table written, read and aggregated."""
    from warehouse.session import spark_session

    home = Path(sys.argv[2])
    with spark_session(home) as spark:
        spark.sql("CREATE DATABASE IF NOT EXISTS cds")
        spark.range(100).selectExpr("id", "id % 7 AS k", "'2026-11-01' AS ds").write.format("delta") \
            .partitionBy("ds").mode("overwrite").saveAsTable("cds.t")  # fmt: skip
        spark.table("cds.t").groupBy("k").count().collect()
        spark.sql("SELECT count(DISTINCT id), max(k) FROM cds.t WHERE ds = '2026-11-01'").collect()


def make() -> Path:
    """Run the workload under spark-submit with ``-XX:ArchiveClassesAtExit`` and keep the archive it dumps, under
    the key of the embedded default's classpath. Archives of other keys are removed: they serve nothing now."""
    from warehouse.confs import session_confs, spark_submit_args

    with tempfile.TemporaryDirectory(prefix="featurehouse-cds-") as scratch:
        settings = {"spark.ui.enabled": "false", "spark.master": "local[2]"}
        os.environ[_MAKING] = "1"  # no older archive in these settings
        try:
            target = archive_path(session_confs(Path(scratch), settings).get("spark.jars", ""))
            args = spark_submit_args(Path(scratch), settings)
        finally:
            os.environ.pop(_MAKING)
        dumped = Path(scratch) / "driver.jsa"
        at = args.index("--driver-java-options")
        args[at + 1] = merge_java_options(args[at + 1], f"-XX:ArchiveClassesAtExit={dumped}", "-Xlog:cds=off")
        import pyspark

        submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
        done = subprocess.run([str(submit), *args, __file__, "--workload", scratch],
                              env={**os.environ, _MAKING: "1", "PYSPARK_PYTHON": sys.executable,
                                   "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))},
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode != 0 or not dumped.is_file():
            raise SystemExit(f"making the class-data archive failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
        target.parent.mkdir(parents=True, exist_ok=True)
        for old in target.parent.glob("driver-*"):
            old.unlink()
        shutil.move(dumped, target)
        target.with_suffix(".options").write_text(_USE.format(path=target) + "\n")
    return target


if __name__ == "__main__":
    if sys.argv[1:2] == ["--workload"]:
        _workload()
    else:
        path = make()
        print(f"class-data archive for the driver JVM: {path} ({path.stat().st_size / 2**20:,.0f} MiB)")
