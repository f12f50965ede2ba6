"""The one exception hierarchy of featurehouse.

It lives in ``schemas`` because every other package may import ``schemas`` and
``schemas`` imports nothing of ours. A message says what was found, what is
allowed, and how to fix it; the CLI prints it as one line and exits non-zero
(:func:`schemas.exit.run_command`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


#: A command's exit status for a bad command, input or environment (argparse's, too) ...
EXIT_ERROR = 2
#: ... and for data the gate or the bad-record limit refused: retrying the same command cannot help.
EXIT_REFUSED = 3


class FeaturehouseError(Exception):
    """Root of every error featurehouse raises on purpose."""

    exit_status = EXIT_ERROR


class RegistryError(FeaturehouseError):
    """A feature registry file is missing, malformed or inconsistent."""


class InvalidNameError(FeaturehouseError):
    """A dataset, feature or table name does not match the allowed pattern."""


class ConfigError(FeaturehouseError):
    """A command-line flag or config value is invalid."""


class LandingError(FeaturehouseError):
    """The landing zone lacks a partition a job needs, or it is not closed yet."""


class TableError(FeaturehouseError):
    """A warehouse table is missing or does not match what the registry says."""


class DataRefusedError(FeaturehouseError):
    """The data itself was refused: too many malformed records, or a partition failed the quality gate.

    Nothing was published. ``details`` is the job's summary, printed on stdout before the
    error line; the exit status is 3, so a scheduler can tell bad data from a bad command.
    """

    exit_status = EXIT_REFUSED

    def __init__(self, message: str, *, details: str = "") -> None:
        super().__init__(message)
        self.details = details


def explain_validation(err: ValidationError, *, where: str = "", in_words: bool = False) -> str:
    """pydantic's report as one line: each problem ``<where>: <location>: <message>``, joined by ``; ``.

    The location is the dotted path of the key (``features.0.name``); a problem of the whole
    model has none and reads ``(top level): <message>``, or ``<where>: <message>`` when there
    is a ``where``. pydantic's ``Value error, `` before a validator's own message is dropped.
    ``in_words``: an unknown key, a missing key and a value outside an enum are said in words
    (``unknown key 'x'; remove it or fix its spelling``) rather than in pydantic's phrases.
    """
    prefix = f"{where}: " if where else ""
    problems = []
    for item in err.errors():
        loc = ".".join(str(part) for part in item["loc"])
        key = loc or "(top level)"
        if in_words and item["type"] == "extra_forbidden":
            problems.append(f"{prefix}unknown key {key!r}; remove it or fix its spelling")
        elif in_words and item["type"] == "missing":
            problems.append(f"{prefix}required key {key!r} is missing")
        elif in_words and item["type"] == "enum":
            expected = item.get("ctx", {}).get("expected", "")
            problems.append(f"{prefix}{key} {item['input']!r} is not allowed; use {expected}")
        else:
            message = item["msg"].removeprefix("Value error, ")
            problems.append(f"{prefix}{message}" if where and not loc else f"{prefix}{key}: {message}")
    return "; ".join(problems)
