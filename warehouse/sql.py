"""``featurehouse sql``: run Spark SQL against the warehouse's metastore and print the result.

    featurehouse sql "SELECT ds, count(*) FROM featurehouse.ads GROUP BY ds ORDER BY ds"
    featurehouse sql --format json "SHOW TABLES IN featurehouse"
    featurehouse sql --allow-write "ALTER TABLE featurehouse.ads SET TBLPROPERTIES ('owner' = 'ads')"

Read-only unless ``--allow-write``: the statement is parsed (not run) first, and only a
query (SELECT, WITH, VALUES, TABLE) with no write inside it, or a SHOW, DESCRIBE or
EXPLAIN, runs. Anything else (INSERT, CREATE, ALTER, DROP, DELETE, UPDATE, MERGE,
RESTORE, OPTIMIZE, VACUUM, CACHE, SET, USE, ...) is refused, naming what it is.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from schemas.errors import ConfigError, FeaturehouseError, first_line
from warehouse.jobs import add_common_arguments, common_settings, run_spark_job


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


@dataclass(frozen=True)
class SqlConfig:
    statement: str
    home: Path
    output: OutputFormat = OutputFormat.TABLE
    limit: int = 1000
    allow_write: bool = False
    registry_dir: Path | None = None
    spark_conf: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.statement.strip():
            raise ConfigError("the SQL statement is empty; pass one, e.g. featurehouse sql \"SHOW TABLES IN featurehouse\"")
        if self.limit <= 0:
            raise ConfigError(f"--limit {self.limit} must be a positive number of rows")


def _plain(value: Any) -> Any:
    """A JSON-ready form of a value Spark returns."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict(recursive=False).items()}
    return value


@dataclass(frozen=True)
class SqlResult:
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool
    output: OutputFormat = OutputFormat.TABLE

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, (_plain(v) for v in row), strict=True)) for row in self.rows]

    def format(self) -> str:
        if self.output is OutputFormat.JSON:
            return json.dumps(self.records(), indent=None, default=str)
        return format_table(self.columns, self.rows, truncated=self.truncated)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list | tuple) or hasattr(value, "asDict"):
        return json.dumps(_plain(value), default=str)
    return str(value)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, truncated: bool = False) -> str:
    """A plain-text table with a header rule and a row count."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()  # noqa: E731
    out = [line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''}{', truncated: raise --limit' if truncated else ''})")
    return "\n".join(out)


_READ_ONLY_COMMANDS = ("Show", "Describe", "Explain")


def write_in(spark: SparkSession, statement: str) -> str | None:
    """What in ``statement`` would change a table or the session (a plan node's name), or None for a read.

    The statement is only parsed. A parsed plan that is a Spark ``Command`` is read-only
    when it is a SHOW, DESCRIBE or EXPLAIN; any other plan is a query, unless some node
    in it is an INSERT or a not-yet-resolved statement (Spark parses ``INSERT``, also
    inside ``WITH``, and Delta's ``RESTORE`` into such nodes).
    """
    parser = spark._jsparkSession.sessionState().sqlParser()
    try:
        plan = parser.parsePlan(statement)
    except Exception as err:  # py4j wraps Spark's ParseException
        raise FeaturehouseError(f"Spark SQL refused the statement: {first_line(err)}") from err
    command = spark._jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.Command")
    root = plan.nodeName()
    if command.isInstance(plan):
        return None if root.startswith(_READ_ONLY_COMMANDS) else root
    for line in plan.treeString().splitlines():
        name = line.lstrip(" :+-'").split(" ", 1)[0].lstrip("'")
        if name.startswith("InsertInto") or name.endswith("Statement"):
            return name
    return None


def run(spark: SparkSession, config: SqlConfig) -> SqlResult:
    """Run one statement; return at most ``config.limit`` rows. Refuse writes unless ``config.allow_write``."""
    if not config.allow_write:
        write = write_in(spark, config.statement)
        if write is not None:
            raise ConfigError(
                f"featurehouse sql is read-only and this statement is a write ({write}); pass --allow-write to run "
                "statements that change tables or the session"
            )
    try:
        frame = spark.sql(config.statement)
    except Exception as err:  # pyspark raises its own AnalysisException/ParseException types
        if type(err).__module__.startswith("pyspark"):
            raise FeaturehouseError(f"Spark SQL refused the statement: {first_line(err)}") from err
        raise
    rows = frame.limit(config.limit + 1).collect()
    return SqlResult(
        columns=tuple(frame.columns),
        rows=tuple(tuple(r) for r in rows[: config.limit]),
        truncated=len(rows) > config.limit,
        output=config.output,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("statement", help="one Spark SQL statement, e.g. \"SELECT count(*) FROM featurehouse.ads\"")
    parser.add_argument(
        "--format", dest="output", choices=[f.value for f in OutputFormat], default=OutputFormat.TABLE.value,
        help="table (default) or json: a JSON array of row objects, for scripts",
    )
    parser.add_argument("--limit", type=int, default=1000, help="print at most this many rows (default 1000)")
    parser.add_argument("--allow-write", action="store_true",
                        help="also run statements that change tables or the session (INSERT, ALTER, DROP, SET, ...)")  # fmt: skip
    add_common_arguments(parser)


def config_from_args(ns: argparse.Namespace) -> SqlConfig:
    return SqlConfig(statement=ns.statement, output=OutputFormat(ns.output), limit=ns.limit,
                     allow_write=ns.allow_write, **common_settings(ns))  # fmt: skip


def parse_args(argv: Sequence[str] | None = None) -> SqlConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse sql", description="Run one Spark SQL statement against the warehouse metastore and print the result."
    )
    add_arguments(parser)
    return config_from_args(parser.parse_args(argv))


def main(argv: Sequence[str] | None = None) -> int:
    return run_spark_job(lambda: parse_args(argv), run)


if __name__ == "__main__":
    sys.exit(main())
