"""``featurehouse sql``: run Spark SQL against the warehouse's metastore and print the result.

    featurehouse sql "SELECT ds, count(*) FROM featurehouse.ads GROUP BY ds ORDER BY ds"
    featurehouse sql --format json "SHOW TABLES IN featurehouse"
    featurehouse sql --format json --all "SELECT impression_id, label_click FROM featurehouse.ads WHERE ds='2026-11-01'"
    featurehouse sql --allow-write "ALTER TABLE featurehouse.ads SET TBLPROPERTIES ('owner' = 'ads')"

At most ``--limit`` rows are printed (default 1000); ``--all`` prints every row. A result
that was cut is never cut silently: the rows are counted (one more Spark job, only then) and
stderr gets one line, e.g. ``featurehouse sql: printed 1,000 of 20,000 rows (--limit 1000);
pass --limit N or --all for every row``, so stdout stays the result alone (with ``--format
json``, a valid JSON array). The table format's last line says so too.

``DESCRIBE DETAIL`` of a table that uses Delta column mapping (every feature table) adds a
line on stderr: its Parquet files name columns ``col-<uuid>``, so engines other than Spark
must read its location through Delta's log with the mapping (docs/engines.md).

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
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pyspark.sql import SparkSession
from tabulate import tabulate

from schemas.config import POSITIVE_INT, SparkJobConfig, satisfies
from schemas.delta_arrow import column_mapping_message
from schemas.settings import COLUMN_MAPPING_MODE
from schemas.errors import ConfigError, FeaturehouseError
from schemas.exit import first_line
from schemas.redact import redact
from warehouse.command import run_spark_job
from warehouse.flags import add_common_arguments, add_engine_argument, common_settings, engine_settings

#: Rows printed when neither --limit nor --all is given.
DEFAULT_LIMIT = 1000


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


@dataclass(frozen=True, kw_only=True)
class SqlConfig(SparkJobConfig):
    statement: str
    output: OutputFormat = OutputFormat.TABLE
    limit: int | None = DEFAULT_LIMIT  # None: every row (--all)
    allow_write: bool = False

    def __post_init__(self) -> None:
        if not self.statement.strip():
            raise ConfigError("the SQL statement is empty; pass one, e.g. featurehouse sql \"SHOW TABLES IN featurehouse\"")
        if not satisfies(self.limit, POSITIVE_INT, optional=True):
            raise ConfigError(f"--limit {self.limit} must be a positive number of rows; pass --all for every row")


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
    """The rows printed, and ``total_rows``, the statement's full row count, when they are fewer (else None)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    total_rows: int | None = None
    output: OutputFormat = OutputFormat.TABLE

    @property
    def truncated(self) -> bool:
        return self.total_rows is not None

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, (_plain(v) for v in row), strict=True)) for row in self.rows]

    def format(self) -> str:
        """What stdout gets: the table, or the JSON array of row objects; nothing else."""
        if self.output is OutputFormat.JSON:
            return json.dumps(self.records(), indent=None, default=str)
        return format_table(self.columns, self.rows, total_rows=self.total_rows)

    def notes(self) -> list[str]:
        """What stderr gets, one line each: that the rows were cut, and what DESCRIBE DETAIL's location needs."""
        notes = []
        if self.total_rows is not None:
            notes.append(
                f"featurehouse sql: printed {len(self.rows):,} of {self.total_rows:,} rows (--limit {len(self.rows)}); "
                "pass --limit N or --all for every row"
            )
        return notes + _column_mapping_notes(self.columns, self.rows)


def _column_mapping_notes(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A line for each DESCRIBE DETAIL row of a table with Delta column mapping: other engines misread its files."""
    if "location" not in columns or "properties" not in columns:
        return []
    location, properties = columns.index("location"), columns.index("properties")
    notes = []
    for row in rows:
        mode = row[properties].get(COLUMN_MAPPING_MODE, "none") if isinstance(row[properties], Mapping) else "none"
        if mode != "none":
            notes.append(f"featurehouse sql: {column_mapping_message(str(row[location]), mode)}")
    return notes


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list | tuple) or hasattr(value, "asDict"):
        return json.dumps(_plain(value), default=str)
    return str(value)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, total_rows: int | None = None) -> str:
    """A plain-text table with a header rule and a row count; ``total_rows``: the rows were cut, of that many."""
    cells = [[_cell(v) for v in row] for row in rows]
    # every cell as Spark gave it: text (no number alignment), its own spaces kept
    out = [tabulate(cells, headers=list(columns), tablefmt="simple", disable_numparse=True, preserve_whitespace=True)]
    if total_rows is None:
        out.append(f"({len(rows):,} row{'s' if len(rows) != 1 else ''})")
    else:
        out.append(f"({len(rows):,} of {total_rows:,} rows, truncated: raise --limit or pass --all)")
    return "\n".join(out)


_READ_ONLY_COMMANDS = ("Show", "Describe", "Explain")
#: The roots of a parsed query's plan (anything else at the root is a command, hence refused unless read-only).
_QUERY_ROOTS = frozenset(
    "Project Aggregate Sort GlobalLimit LocalLimit Offset Tail Filter Union Distinct Deduplicate Intersect Except "
    "Join Window Generate Expand Sample Pivot Unpivot SubqueryAlias CTE UnresolvedWith WithCTE UnresolvedRelation "
    "UnresolvedInlineTable LocalRelation OneRowRelation Range UnresolvedTableValuedFunction UnresolvedHint "
    "UnresolvedSubqueryColumnAliases RepartitionByExpression Repartition".split()
)
#: Delta's statements that change a table, which Delta's parser reads before Spark's and EXPLAIN's parser (Spark's)
#: does not know: refused by their first word. Delta's DESCRIBE HISTORY and DETAIL are reads, known by their first two.
_DELTA_WRITES = ("VACUUM", "RESTORE", "OPTIMIZE", "REORG", "CONVERT", "GENERATE")
_LEADING_COMMENTS = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.DOTALL)


def _node_names(tree: str) -> list[str]:
    """The node names of a plan's tree string, root first (``'Project [...]`` -> ``Project``)."""
    return [line.lstrip(" :+-'").split(" ", 1)[0].lstrip("'") for line in tree.splitlines() if line.strip()]


def write_in(spark: SparkSession, statement: str) -> str | None:
    """What in ``statement`` would change a table or the session (a plan node's name), or None for a read.

    The statement is only parsed, through ``EXPLAIN EXTENDED``, which runs nothing and works the same
    in a classic session and over Spark Connect. The parsed plan is read-only when its root is a SHOW,
    DESCRIBE or EXPLAIN, or a query's node (``_QUERY_ROOTS``) with no INSERT or not-yet-resolved
    statement below it (Spark parses ``INSERT``, also inside ``WITH``, into such nodes). Any other root
    is a command and named. Delta's own writes (VACUUM, RESTORE, ...) are named by their first word; its DESCRIBE
    HISTORY and DETAIL pass.
    """
    words = _LEADING_COMMENTS.sub("", statement, count=1).upper().split(None, 2)
    if words and words[0] in _DELTA_WRITES:
        return words[0]
    if words[:1] in (["DESC"], ["DESCRIBE"]) and words[1:2] in (["HISTORY"], ["DETAIL"]):
        return None  # Delta's reads (``... LIMIT n`` is Delta's grammar alone); anything else there is a DESCRIBE
    try:
        text = spark.sql(f"EXPLAIN EXTENDED {statement}").first()[0]
    except Exception as err:  # pyspark's ParseException, classic or Connect
        if type(err).__module__.startswith("pyspark"):
            raise FeaturehouseError(f"Spark SQL refused the statement: {first_line(err)}") from err
        raise
    parsed = text.split("== Parsed Logical Plan ==\n", 1)[-1].split("\n== Analyzed Logical Plan ==", 1)[0]
    names = _node_names(parsed)
    root = names[0] if names else "?"
    if root.startswith(_READ_ONLY_COMMANDS):
        return None
    if root not in _QUERY_ROOTS:
        return root
    for name in names:
        if name.startswith("InsertInto") or name.endswith("Statement"):
            return name
    return None


def run(spark: SparkSession, config: SqlConfig) -> SqlResult:
    """Run one statement; return at most ``config.limit`` rows (None: all). Refuse writes unless ``allow_write``.

    A result with more rows than the limit is counted (one more Spark job over the same
    DataFrame, only then), so the caller can say how many it did not print.
    """
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
    if config.limit is None:
        rows, total = frame.collect(), None
    else:
        rows = frame.limit(config.limit + 1).collect()
        total = frame.count() if len(rows) > config.limit else None
        rows = rows[: config.limit]
    return SqlResult(columns=tuple(frame.columns), rows=tuple(tuple(r) for r in rows), total_rows=total,
                     output=config.output)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("statement", help="one Spark SQL statement, e.g. \"SELECT count(*) FROM featurehouse.ads\"")
    parser.add_argument(
        "--format", dest="output", choices=[f.value for f in OutputFormat], default=OutputFormat.TABLE.value,
        help="table (default) or json: a JSON array of row objects, for scripts",
    )
    rows = parser.add_mutually_exclusive_group()
    rows.add_argument("--limit", type=int, default=None, metavar="N",
                      help=f"print at most N rows (default {DEFAULT_LIMIT}); when the result has more, stderr says "
                           "how many it has and stdout stays the result alone")  # fmt: skip
    rows.add_argument("--all", action="store_true", help="print every row, however many (for scripts)")
    parser.add_argument("--allow-write", action="store_true",
                        help="also run statements that change tables or the session (INSERT, ALTER, DROP, SET, ...)")  # fmt: skip
    add_common_arguments(parser)
    add_engine_argument(parser)


def config_from_args(ns: argparse.Namespace) -> SqlConfig:
    limit = None if ns.all else DEFAULT_LIMIT if ns.limit is None else ns.limit
    return SqlConfig(statement=ns.statement, output=OutputFormat(ns.output), limit=limit,
                     allow_write=ns.allow_write, **common_settings(ns), **engine_settings(ns))  # fmt: skip


def parse_args(argv: Sequence[str] | None = None) -> SqlConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse sql",
        description="Run one Spark SQL statement against the warehouse metastore and print the result.",
        epilog=f"At most --limit rows are printed (default {DEFAULT_LIMIT}); a result that was cut is counted and "
        "stderr says so in one line, e.g. 'featurehouse sql: printed 1,000 of 20,000 rows (--limit 1000); pass "
        "--limit N or --all for every row'. Stdout holds only the result: with --format json, a JSON array.",
    )
    add_arguments(parser)
    return config_from_args(parser.parse_args(argv))


def run_with_notes(spark: SparkSession, config: SqlConfig) -> SqlResult:
    """:func:`run`, then its notes (rows cut, ...) on stderr, one line each, redacted; stdout gets only ``format()``."""
    result = run(spark, config)
    for note in result.notes():
        print(redact(note), file=sys.stderr, flush=True)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    return run_spark_job(lambda: parse_args(argv), run_with_notes)


if __name__ == "__main__":
    sys.exit(main())
