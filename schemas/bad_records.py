"""The one bad-record rule: a ds whose share of malformed records passes a limit is refused before staging.

The batch label join, the stream's publish step and the Criteo import all judge a day by it,
with the registry's ``quality.max_bad_fraction`` (:class:`schemas.quality.DatasetQuality`) or
the job's ``--max-bad-fraction`` over it.
"""

from __future__ import annotations

from schemas.errors import ConfigError
from schemas.quality import DatasetQuality


def check_max_bad_fraction(value: float | None) -> None:
    """Refuse a ``--max-bad-fraction`` that is not a share in [0, 1] (None: the registry's limit)."""
    if value is not None and not 0 <= value <= 1:
        raise ConfigError(f"--max-bad-fraction {value} is not a share; give one in [0, 1], e.g. 0.01")


def bad_fraction_limit(quality: DatasetQuality, override: float | None = None) -> float:
    """The share of malformed records a ds may have: ``override`` (the job's flag) if given, else the registry's."""
    return quality.max_bad_fraction if override is None else override


def too_many_bad(bad: int, read: int, limit: float, *, what: str) -> str | None:
    """Why ``bad`` malformed records of ``read`` refuse the ds, or None if they do not (none read: never).

    >>> too_many_bad(3, 100, 0.01, what="label records")
    '3 of 100 label records (3.00%) are malformed, more than the 1.00% allowed'
    """
    if not read or bad / read <= limit:
        return None
    return f"{bad:,} of {read:,} {what} ({bad / read:.2%}) are malformed, more than the {limit:.2%} allowed"
