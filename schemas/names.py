"""Strict name and date checks, applied before a name reaches a path or a query."""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated

from pydantic import AfterValidator

from schemas.errors import ConfigError, InvalidNameError

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
NAME_RULE = "lowercase letters, digits and '_', starting with a letter, at most 63 characters"
# No '/': a job id names its folder of checkpoints (<home>/runs/<job_id>), so it must stay one path component.
JOB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
JOB_ID_RULE = "1-200 letters, digits and _ . : -, starting with a letter or digit (e.g. ctr-model-v3)"


def valid_job_id(value: object) -> bool:
    """Whether ``value`` is an allowed training-job id."""
    return isinstance(value, str) and bool(JOB_ID_PATTERN.fullmatch(value))


def _name_refused(value: object, what: str = "") -> str | None:
    """Why ``value`` is not a safe identifier (the one rule: :data:`NAME_PATTERN`), or None when it is one."""
    if isinstance(value, str) and NAME_PATTERN.fullmatch(value):
        return None
    return f"{what} name {value!r} is not allowed; use {NAME_RULE}".lstrip()


def validate_name(what: str, value: str) -> str:
    """Return ``value`` if it is a safe identifier, else raise :class:`InvalidNameError`.

    >>> validate_name("dataset", "ads")
    'ads'
    """
    problem = _name_refused(value, what)
    if problem:
        raise InvalidNameError(problem)
    return value


def _safe_name(value: str) -> str:
    problem = _name_refused(value)
    if problem:
        raise ValueError(problem)  # pydantic reports it under the field's location: "<loc>: name 'X' is not allowed"
    return value


#: A pydantic field holding a safe identifier (:data:`NAME_PATTERN`); the same rule as :func:`validate_name`.
SafeName = Annotated[str, AfterValidator(_safe_name)]


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
