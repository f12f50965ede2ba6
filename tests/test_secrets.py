"""Secrets (connection passwords) never appear in what featurehouse prints: errors, progress lines."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from schemas.config import SparkJobConfig
from schemas.errors import ConfigError, FeaturehouseError
from schemas.exit import run_command
from schemas.redact import REDACTED, is_secret_key, redact, redact_conf

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PASSWORD_KEY = "spark.hadoop.javax.jdo.option.ConnectionPassword"


def test_the_value_of_a_secret_conf_key_is_masked():
    assert redact(f"bad conf {PASSWORD_KEY}=hunter2 given") == f"bad conf {PASSWORD_KEY}={REDACTED} given"
    assert redact("spark.hadoop.fs.s3a.access.key=AKIA1 spark.hadoop.fs.s3a.secret.key=s3cr3t") == (
        f"spark.hadoop.fs.s3a.access.key={REDACTED} spark.hadoop.fs.s3a.secret.key={REDACTED}"
    )
    assert REDACTED == "*********(redacted)"  # Spark's own marker


def test_a_non_secret_key_is_untouched():
    assert redact("spark.sql.shuffle.partitions=8") == "spark.sql.shuffle.partitions=8"
    assert not is_secret_key("spark.sql.shuffle.partitions")


def test_the_password_of_a_url_is_masked():
    assert redact("cannot connect to jdbc:postgresql://hive:hunter2@db:5432/metastore: refused") == (
        f"cannot connect to jdbc:postgresql://hive:{REDACTED}@db:5432/metastore: refused"
    )
    assert redact("s3a://bucket/path@v1") == "s3a://bucket/path@v1"  # no user:password@ in it


def test_password_attributes_of_jdbc_urls_are_masked():
    derby = "jdbc:derby:;databaseName=/data/metastore_db;user=app;password=hunter2;create=true"
    assert redact(derby) == f"jdbc:derby:;databaseName=/data/metastore_db;user=app;password={REDACTED};create=true"
    postgres = "spark.hadoop.javax.jdo.option.ConnectionURL=jdbc:postgresql://db/hive?password=hunter2&user=hive"
    assert redact(postgres) == postgres.replace("hunter2", REDACTED)
    assert redact("jdbc:postgresql://db/hive?user=hive&password=hunter2") == (
        f"jdbc:postgresql://db/hive?user=hive&password={REDACTED}"
    )


def test_known_secret_values_are_masked_wherever_they_occur():
    text = "login failed for 'hunter2' (hunter2 is wrong)"
    assert redact(text, secrets=["hunter2", ""]) == f"login failed for '{REDACTED}' ({REDACTED} is wrong)"
    assert redact(text) == text  # bare, it is masked only when known


def test_redact_conf_masks_the_values_of_secret_keys():
    conf = {PASSWORD_KEY: "hunter2", "spark.master": "local[*]", "spark.x.url": "http://u:hunter2@h"}
    assert redact_conf(conf) == {PASSWORD_KEY: REDACTED, "spark.master": "local[*]", "spark.x.url": f"http://u:{REDACTED}@h"}


def test_run_command_redacts_the_error_message(capsys):
    def body() -> str:
        raise ConfigError(f"cannot use --conf {PASSWORD_KEY}=hunter2 here")

    assert run_command(body) == 2
    out, err = capsys.readouterr()
    assert "hunter2" not in out + err
    assert err.strip() == f"error: cannot use --conf {PASSWORD_KEY}={REDACTED} here"


def test_a_spark_job_masks_bare_conf_secrets_in_its_error(monkeypatch, capsys, tmp_path):
    from warehouse import command

    @contextmanager
    def no_spark(home, conf, **_engine):
        yield None

    def run(spark, config):
        raise FeaturehouseError("the metastore refused login hunter2")  # the value alone, not key=value

    monkeypatch.setattr(command, "spark_session", no_spark)
    config = SparkJobConfig(home=tmp_path, spark_conf={PASSWORD_KEY: "hunter2", "spark.master": "local[1]"})
    assert command.run_spark_job(lambda: config, run) == 2
    err = capsys.readouterr().err
    assert "hunter2" not in err and err.strip() == f"error: the metastore refused login {REDACTED}"


def test_a_malformed_secret_conf_flag_is_not_echoed():
    from warehouse.confs import parse_conf_pairs

    with pytest.raises(ConfigError) as caught:
        parse_conf_pairs([f"{PASSWORD_KEY} hunter2"])
    assert "hunter2" not in str(caught.value) and PASSWORD_KEY in str(caught.value)


def test_progress_lines_are_redacted(capsys):
    from schemas.progress import stderr_progress

    stderr_progress("connecting to jdbc:derby:;databaseName=x;password=hunter2")
    assert capsys.readouterr().err.rstrip().endswith(f";password={REDACTED}")


@pytest.mark.spark
@pytest.mark.slow
def test_the_cli_never_prints_a_conf_password(tmp_path):
    """A failing ``featurehouse sql`` in its own JVM (its own --home: Derby admits one JVM per folder; not on an
    engine, which refuses a static setting such as a metastore password, naming only its key)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env.pop("FEATUREHOUSE_HOME", None)
    result = subprocess.run(
        [str(BIN / "featurehouse"), "sql", "--home", str(tmp_path), "--engine", "off",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
         "--conf", f"{PASSWORD_KEY}=hunter2-do-not-print", "SELECT * FROM no_such_db.no_such_table"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode != 0, result.stdout + result.stderr
    assert "no_such_table" in result.stderr  # it failed for the reason meant, not at startup
    assert "hunter2-do-not-print" not in result.stdout
    assert "hunter2-do-not-print" not in result.stderr
