"""Profiles: a small settings file per target (``profiles/<name>.yaml``) choosing master, metastore and warehouse.

    featurehouse label-join --profile cluster --dataset ads --ds 2026-11-01
    FEATUREHOUSE_PROFILE=cluster featurehouse sql "SHOW TABLES IN featurehouse"
    .venv/bin/spark-submit $(featurehouse spark-args --profile cluster) etl/label_join.py --profile cluster ...

A profile is a map of plain Spark settings (``spark:``), applied over the embedded default and
under every ``--conf``; ``{home}`` in a value is the ``--home`` folder. No job reads a profile's
name: it only chooses settings, so the same code runs on every target. ``cluster:`` describes the
services ``featurehouse cluster up`` starts on this machine for the profile (a trial cluster).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from schemas.errors import ConfigError, explain_validation

PROFILE_VARIABLE = "FEATUREHOUSE_PROFILE"
PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"


class ClusterServices(BaseModel):
    """What ``featurehouse cluster up`` starts for a profile on this machine."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    worker_cores: int = Field(default=0, ge=0)  # 0: four times os.cpu_count()
    worker_memory: str = Field(default="8g", pattern=r"^[0-9]+[mg]$")
    thrift_port: int = Field(default=10000, gt=0, lt=65536)
    master_ui_port: int = Field(default=8080, gt=0, lt=65536)
    worker_ui_port: int = Field(default=8081, gt=0, lt=65536)

    def cores(self) -> int:
        return self.worker_cores or 4 * (os.cpu_count() or 1)


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    spark: dict[str, str] = Field(default_factory=dict)
    cluster: ClusterServices = Field(default_factory=ClusterServices)
    #: A remote engine, a Spark Connect server of the same featurehouse version (``sc://host:port``, with
    #: ``/;token=...`` where it asks for one): commands that can run on an engine are its clients.
    engine: str | None = Field(default=None, pattern=r"^sc://[^/\s]+")

    @field_validator("spark", mode="before")
    @classmethod
    def _plain_settings(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("must be a map of Spark settings, e.g. {spark.master: 'spark://host:7077'}")
        bad = [k for k, v in value.items() if not isinstance(k, str) or isinstance(v, dict | list) or v is None]
        if bad:
            raise ValueError(f"{bad[0]!r} must be a setting name with one plain value")
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}

    def settings(self, home: Path) -> dict[str, str]:
        """The profile's Spark settings with ``{home}`` replaced by ``home``."""
        return {k: v.replace("{home}", str(home)) for k, v in self.spark.items()}


def profile_path(name: str) -> Path:
    """``name``'s file: a path to a .yaml file, or the name of one in ``profiles/``."""
    if name.endswith((".yaml", ".yml")) or os.sep in name:
        return Path(name)
    return PROFILES_DIR / f"{name}.yaml"


def load_profile(name: str) -> Profile:
    """The profile ``name`` (``local``, ``cluster``, or a path to a .yaml file); a bad one is a ConfigError."""
    path = profile_path(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
        raise ConfigError(f"profile {name!r}: no file {path}; choose one of {known}, or pass a path to a .yaml file")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(raw, dict):
            raise ValueError("the file must be a map with spark: (and optionally description:, cluster:)")
        return Profile(name=path.stem, **raw)
    except (yaml.YAMLError, ValueError, TypeError) as err:
        detail = explain_validation(err) if isinstance(err, ValidationError) else str(err).splitlines()[0]
        raise ConfigError(f"profile {path} is not valid: {detail}") from err


def chosen_profile(name: str | None) -> Profile | None:
    """The profile named by ``--profile``, else by ``$FEATUREHOUSE_PROFILE``, else None (the embedded default)."""
    name = name or os.environ.get(PROFILE_VARIABLE) or None
    return load_profile(name) if name else None
