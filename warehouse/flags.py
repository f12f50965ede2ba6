"""The flags every job shares (``--home``, ``--registry-dir``, ``--profile``, ``--conf``) and the settings they make."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from schemas.paths import default_home
from warehouse.confs import parse_conf_pairs
from schemas.profiles import chosen_profile

#: A remote engine's ``sc://`` URL for the commands with an engine mode, over the profile's ``engine``.
ENGINE_URL_VARIABLE = "FEATUREHOUSE_ENGINE_URL"


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """``--home``, ``--registry-dir``, ``--profile`` and repeatable ``--conf k=v``, shared by every job."""
    parser.add_argument(
        "--home",
        type=Path,
        default=None,
        help="data folder holding landing/, warehouse/ and metastore_db/ (default: $FEATUREHOUSE_HOME, else this checkout's data/)",
    )
    parser.add_argument(
        "--registry-dir",
        type=Path,
        default=None,
        help="folder of feature registry files <dataset>.yaml (default: schemas/datasets in this repo)",
    )
    parser.add_argument(
        "--profile",
        default=None,
        metavar="NAME",
        help="a settings file choosing master, metastore and warehouse: local (the embedded default), cluster "
        "(profiles/cluster.yaml), or a path to a .yaml file (default: $FEATUREHOUSE_PROFILE, else local)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, repeatable; overrides the profile and the embedded defaults (e.g. --conf spark.master=yarn)",
    )


def common_settings(ns: argparse.Namespace) -> dict[str, Any]:
    """The shared settings of a parsed namespace, ready to pass to a config dataclass.

    ``spark_conf`` is the profile's settings with every ``--conf`` over them: a config carries
    all its settings, so a process it starts (the stream's publish step) gets the same ones.
    """
    home = (ns.home or default_home()).resolve()
    profile = chosen_profile(ns.profile)
    return {
        "home": home,
        "registry_dir": ns.registry_dir,
        "spark_conf": {**(profile.settings(home) if profile else {}), **parse_conf_pairs(ns.conf)},
    }


def add_engine_argument(parser: argparse.ArgumentParser) -> None:
    """``--engine auto|off``, for the commands that can run as clients of the home's engine (warehouse.engine)."""
    parser.add_argument(
        "--engine", choices=["auto", "off"], default="auto",
        help="auto (default): on the embedded default, run on the home's resident Spark engine, started in the "
        "background if none runs (`featurehouse engine status|stop`); off: start a Spark session of this command's "
        "own (the classic way; refused while the home's engine runs)",
    )  # fmt: skip


def engine_settings(ns: argparse.Namespace) -> dict[str, Any]:
    """``engine`` and the remote ``engine_url`` of a namespace parsed with :func:`add_engine_argument`: that of
    ``$FEATUREHOUSE_ENGINE_URL`` (how an Airflow task hands on its Connection's, token included, without putting it
    on a command line), else the profile's."""
    profile = chosen_profile(ns.profile)
    url = os.environ.get(ENGINE_URL_VARIABLE) or (profile.engine if profile else None)
    return {"engine": ns.engine, "engine_url": url}
