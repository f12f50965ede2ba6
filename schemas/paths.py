"""Where data lives on the embedded default: one folder, shared by the JVM jobs and the JVM-free reader."""

from __future__ import annotations

import os
from pathlib import Path

HOME_VARIABLE = "FEATUREHOUSE_HOME"


def default_home() -> Path:
    """The data folder: ``$FEATUREHOUSE_HOME`` if set, else ``./data``."""
    return Path(os.environ.get(HOME_VARIABLE) or "data").resolve()
