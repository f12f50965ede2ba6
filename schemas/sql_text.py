"""Spark SQL text for expressions built from the registry.

A registry-wide expression written with PySpark's Column API is a tree of Py4J calls (a
``F.col``, a ``cast``, an ``alias``, each a round trip to the JVM, and one more when Python
frees it): the flattening, the validity test and the gate's metrics of the demo's 91
features came to about 20,000 calls, 2-3 s of every label join whatever its size. The
same expression as SQL text is one call (``F.expr``) that Spark parses on its side.
Only names and literals that the registry and the quality suite hold go into the text,
quoted here.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any


def identifier(name: str) -> str:
    """``name`` as a quoted Spark SQL identifier: ```name```."""
    return "`" + name.replace("`", "``") + "`"


def literal(value: Any) -> str:
    """A Python value as the Spark SQL literal of the type ``F.lit`` gives it (ints as INT or BIGINT, floats as DOUBLE)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"integer literal {value} is outside BIGINT's range")
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return f"{value!r}D"
        return f"CAST('{'NaN' if math.isnan(value) else ('Infinity' if value > 0 else '-Infinity')}' AS DOUBLE)"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    raise TypeError(f"no Spark SQL literal for {type(value).__name__} value {value!r}")
