"""A feature table as Arrow under its logical column names, for engines that misread Delta column mapping.

Feature tables use column mapping (``delta.columnMapping.mode = name``): their Parquet files
name every column ``col-<uuid>``, nested struct fields too, and only Delta's log knows the
names. Readers that ignore the mapping get it wrong, some silently: deltalake 1.6.6's
``DeltaTable.to_pyarrow_table()`` / ``to_pyarrow_dataset()`` / ``to_pandas()`` give nulls in every
column but the partition column, and plain Parquet readers (pyarrow.parquet, DuckDB's
``read_parquet``) see ``col-<uuid>`` names and also the files Delta has removed but not yet
vacuumed. docs/engines.md has the table of engines; this module is the recipe:

    from schemas.delta_arrow import arrow_dataset
    table = arrow_dataset("/data/warehouse/featurehouse.db/ads")        # latest version; version=N pins one
    frame = table.to_table(["label_click", "user_ctr_7d"], days=[dt.date(2026, 11, 1)]).to_pandas()
    pl.from_arrow(table.to_reader(["ds", "label_click"]))                # Polars
    reader = table.to_reader(); duckdb.sql("SELECT ds, avg(label_click) FROM reader GROUP BY ds")  # DuckDB

It reads the files of one version as the log lists them, each column under its physical name
(nested fields included), the partition column from the log, and hands out record batches
under the logical names with Delta's types. A table whose protocol needs reader features it
does not honour (deletion vectors, ...) is refused, as the reader's snapshot is.
``deltalake`` is imported when a table is opened, not with this module.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as pds
from pyarrow import fs as pafs

from schemas.settings import COLUMN_MAPPING_MODE
from schemas.delta_snapshot import PHYSICAL_NAME_KEY
from schemas.errors import TableError
from schemas.names import format_ds
from schemas.registry import PARTITION_COLUMN

#: The table property that turns column mapping on ("name" or "id"; "none" or absent: off).
#: Reader table features :func:`arrow_dataset` honours; any other one (deletion vectors, ...) is refused.
HONOURED_READER_FEATURES = frozenset({"columnMapping", "timestampNtz"})


def column_mapping_message(table_uri: str, mode: str) -> str:
    """What to tell someone who reads a column-mapped table with another engine: what goes wrong, what reads right."""
    return (
        f"Delta table {table_uri} uses column mapping (mode {mode}): its Parquet files name columns col-<uuid>, so "
        "deltalake's DeltaTable.to_pyarrow_table()/to_pyarrow_dataset() read every column but the partition column "
        "as null and plain Parquet readers see col-<uuid> names; read it with Spark, deltalake's QueryBuilder or "
        "schemas.delta_arrow.arrow_dataset (docs/engines.md)"
    )


def check_plain_readable(table_uri: str) -> None:
    """Refuse a table whose files engines that ignore column mapping misread: a :class:`TableError` naming the readers
    that read it right. Call it before handing ``table_uri`` to ``DeltaTable.to_pyarrow_*`` or to a Parquet reader.

        check_plain_readable("/data/warehouse/featurehouse.db/ads")  # TableError: ... uses column mapping (mode name)
    """
    mode = _open(table_uri, None).metadata().configuration.get(COLUMN_MAPPING_MODE, "none")
    if mode != "none":
        raise TableError(column_mapping_message(table_uri, mode))


@dataclass(frozen=True)
class LogicalDataset:
    """One version of a Delta table: its data files under the logical column names, read on demand.

    ``physical`` is the pyarrow dataset of those files under their physical names (the
    partition column under its own name, from the log): what the logical batches are read
    from, column by column.
    """

    table_uri: str
    version: int
    schema: pa.Schema  # logical names, Delta's types, the table's column order
    physical: pds.Dataset  # the same columns in the same order, under the files' names

    def to_reader(self, columns: Sequence[str] | None = None, *, days: Iterable[dt.date] | None = None,
                  batch_size: int = 65_536) -> pa.RecordBatchReader:  # fmt: skip
        """Record batches of ``columns`` (default: all) of the partitions ``days`` (default: all), logical names."""
        names = list(self.schema.names if columns is None else columns)
        unknown = [c for c in names if c not in self.schema.names]
        if unknown:
            raise TableError(
                f"column(s) {', '.join(map(repr, unknown))} are not in the Delta schema of {self.table_uri} at version "
                f"{self.version}; columns there: {', '.join(self.schema.names)}"
            )
        logical = pa.schema([self.schema.field(c) for c in names])
        physical = [self.physical.schema.field(self.schema.get_field_index(c)).name for c in names]
        where = None if days is None else pds.field(PARTITION_COLUMN).isin([format_ds(d) for d in days])
        scanner = self.physical.scanner(columns=physical, filter=where, batch_size=batch_size)

        def batches() -> Iterator[pa.RecordBatch]:
            for batch in scanner.to_batches():
                # view, not cast: a cast matches struct fields by name and fills the ones it misses with nulls
                arrays = [column.view(field.type) for column, field in zip(batch.columns, logical, strict=True)]
                yield pa.RecordBatch.from_arrays(arrays, schema=logical)

        return pa.RecordBatchReader.from_batches(logical, batches())

    def to_table(self, columns: Sequence[str] | None = None, *, days: Iterable[dt.date] | None = None) -> pa.Table:
        """:meth:`to_reader`, read whole."""
        return self.to_reader(columns, days=days).read_all()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """Every row, for any Arrow consumer: ``pa.table(ds)``, ``pl.DataFrame(ds)``, DuckDB's ``FROM ds``."""
        return self.to_reader().__arrow_c_stream__(requested_schema)


def arrow_dataset(table_uri: str, *, version: int | None = None) -> LogicalDataset:
    """The Delta table at ``table_uri`` at ``version`` (default: latest), readable under its logical column names.

    A table whose protocol needs reader features other than ``HONOURED_READER_FEATURES`` is a
    :class:`TableError`: its Parquet files alone would give wrong rows.
    """
    table = _open(table_uri, version)
    protocol = table.protocol()
    unhonoured = sorted(set(protocol.reader_features or ()) - HONOURED_READER_FEATURES)
    if protocol.min_reader_version > 3 or unhonoured:
        raise TableError(
            f"Delta table {table_uri} needs reader features "
            f"{', '.join(unhonoured) or f'of protocol {protocol.min_reader_version}'} that arrow_dataset does not "
            f"honour (it honours {', '.join(sorted(HONOURED_READER_FEATURES))}); read it with Spark, or rewrite it "
            "without them (e.g. REORG TABLE ... APPLY (PURGE) for deletion vectors)"
        )
    partitions = list(table.metadata().partition_columns)
    delta_schema = pa.schema(table.schema().to_arrow())  # each field's physical name in its metadata
    logical = pa.schema([_renamed(f, _logical_name) for f in delta_schema])
    physical = pa.schema([_renamed(f, _logical_name if f.name in partitions else _physical_name) for f in delta_schema])
    actions = pa.table(table.get_add_actions(flatten=True))
    root = table.table_uri.rstrip("/")
    filesystem, base = pafs.FileSystem.from_uri(root)
    values = {c: actions.column(f"partition.{c}").to_pylist() if len(actions) else [] for c in partitions}
    fragments = pds.FileSystemDataset.from_paths(
        [f"{base}/{path}" for path in actions.column("path").to_pylist()],
        schema=physical,
        format=pds.ParquetFileFormat(),
        filesystem=filesystem,
        partitions=[_partition_expression({c: values[c][i] for c in partitions}, logical) for i in range(len(actions))],
    )
    return LogicalDataset(table_uri=root, version=table.version(), schema=logical, physical=fragments)


def _open(table_uri: str, version: int | None):  # -> deltalake.DeltaTable
    import deltalake
    from deltalake.exceptions import DeltaError

    try:
        return deltalake.DeltaTable(table_uri, version=version)
    except (DeltaError, OSError, ValueError) as err:
        at = "its latest version" if version is None else f"version {version}"
        reason = " ".join(str(err).split())
        raise TableError(
            f"cannot read the Delta log of {table_uri} at {at}: {reason}; check that the path is a Delta table "
            "(DESCRIBE DETAIL <table> shows its location) and that the version exists (DESCRIBE HISTORY)"
        ) from err


def _logical_name(field: pa.Field) -> str:
    return field.name


def _physical_name(field: pa.Field) -> str:
    return (field.metadata or {}).get(PHYSICAL_NAME_KEY.encode(), field.name.encode()).decode()


def _renamed(field: pa.Field, name: Callable[[pa.Field], str]) -> pa.Field:
    """``field`` under ``name(field)``, its nested fields likewise, without metadata."""
    kind = field.type
    if pa.types.is_struct(kind):
        kind = pa.struct([_renamed(kind.field(i), name) for i in range(kind.num_fields)])
    elif pa.types.is_map(kind):
        kind = pa.map_(_renamed(kind.key_field, name), _renamed(kind.item_field, name), kind.keys_sorted)
    elif pa.types.is_large_list(kind):
        kind = pa.large_list(_renamed(kind.value_field, name))
    elif pa.types.is_list(kind):
        kind = pa.list_(_renamed(kind.value_field, name))
    return pa.field(name(field), kind, field.nullable)


def _partition_expression(values: dict[str, str | None], schema: pa.Schema) -> pds.Expression:
    """The partition values of one file (strings in the log) as a filter the dataset fills those columns from."""
    expression = pds.scalar(True)
    for column, value in values.items():
        term = (pds.field(column).is_null() if value is None
                else pds.field(column) == pa.scalar(value).cast(schema.field(column).type))  # fmt: skip
        expression = expression & term
    return expression
