"""Strict name and date checks, applied before a name reaches a path or a query."""

from __future__ import annotations

import datetime as dt
import re

from schemas.errors import ConfigError, InvalidNameError

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
NAME_RULE = "lowercase letters, digits and '_', starting with a letter, at most 63 characters"
# No '/': a job id names its folder of checkpoints (<home>/runs/<job_id>), so it must stay one path component.
JOB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
JOB_ID_RULE = "1-200 letters, digits and _ . : -, starting with a letter or digit (e.g. ctr-model-v3)"


def valid_job_id(value: object) -> bool:
    """Whether ``value`` is an allowed training-job id."""
    return isinstance(value, str) and bool(JOB_ID_PATTERN.fullmatch(value))


def validate_name(what: str, value: str) -> str:
    """Return ``value`` if it is a safe identifier, else raise :class:`InvalidNameError`.

    >>> validate_name("dataset", "ads")
    'ads'
    """
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise InvalidNameError(f"{what} name {value!r} is not allowed; use {NAME_RULE}")
    return value


def parse_ds(value: str, *, what: str = "ds") -> dt.date:
    """Parse a ``YYYY-MM-DD`` partition date; anything else is a :class:`ConfigError`."""
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            raise ValueError(value)
        return dt.date.fromisoformat(value)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{what} {value!r} is not a date; write it as YYYY-MM-DD, e.g. 2026-11-01") from err


def format_ds(day: dt.date) -> str:
    """The partition string of a date: ``YYYY-MM-DD``."""
    return day.isoformat()
