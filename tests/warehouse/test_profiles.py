"""Profiles: settings files choosing master, metastore and warehouse, under every --conf; no Spark needed."""

from __future__ import annotations

import argparse

import pytest

from schemas.errors import ConfigError
from warehouse.flags import add_common_arguments, common_settings
from schemas.profiles import PROFILE_VARIABLE, load_profile


def settings(*argv: str) -> dict:
    parser = argparse.ArgumentParser()
    add_common_arguments(parser)
    return common_settings(parser.parse_args(list(argv)))


def test_the_cluster_profile_chooses_master_metastore_and_warehouse_under_home(tmp_path):
    conf = settings("--profile", "cluster", "--home", str(tmp_path))["spark_conf"]
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert conf["spark.hadoop.javax.jdo.option.ConnectionURL"].startswith("jdbc:postgresql://127.0.0.1:")
    assert conf["spark.sql.warehouse.dir"] == f"{tmp_path.resolve()}/warehouse"


def test_conf_flags_win_over_the_profile_and_the_variable_chooses_one(tmp_path, monkeypatch):
    conf = settings("--profile", "cluster", "--conf", "spark.master=local[1]")["spark_conf"]
    assert conf["spark.master"] == "local[1]"
    monkeypatch.setenv(PROFILE_VARIABLE, "cluster")
    assert settings()["spark_conf"]["spark.master"] == "spark://127.0.0.1:7077"
    assert settings("--profile", "local")["spark_conf"] == {}  # the embedded default: nothing over it


def test_a_profile_file_by_path_and_its_services(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("spark: {spark.master: 'spark://10.0.0.5:7077', spark.eventLog.enabled: true}\n"
                    "cluster: {worker_cores: 3, thrift_port: 10001}\n")  # fmt: skip
    profile = load_profile(str(path))
    assert profile.settings(tmp_path) == {"spark.master": "spark://10.0.0.5:7077", "spark.eventLog.enabled": "true"}
    assert (profile.cluster.cores(), profile.cluster.thrift_port) == (3, 10001)


@pytest.mark.parametrize(("text", "message"), [
    ("spark: {spark.master: local}\nmaster: x\n", r"master: Extra inputs are not permitted"),
    ("spark: {spark.jars: [a, b]}\n", r"'spark.jars' must be a setting name with one plain value"),
    ("spark: [spark.master]\n", r"must be a map of Spark settings"),
    ("cluster: {worker_memory: lots}\n", r"cluster.worker_memory: String should match pattern"),
])  # fmt: skip
def test_a_bad_profile_is_refused_naming_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"profile {path} is not valid: .*{message}"):
        load_profile(str(path))


def test_an_unknown_profile_names_the_known_ones():
    with pytest.raises(ConfigError, match=r"profile 'clutser': no file .*clutser.yaml; choose one of cluster, local"):
        load_profile("clutser")
