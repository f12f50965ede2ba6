"""Schema evolution driven by the registry: what a registry change does to a feature table.

    featurehouse features diff  --dataset ads     # show the plan, change nothing
    featurehouse features apply --dataset ads     # run it, then sync the catalog

The plan compares the registry with the table (its columns) and with the catalog
(what was last synced). Table changes are metadata only, never a rewrite of data files:

* a new feature adds a nullable column; partitions written before read it as null;
* ``renamed_from`` renames the column and ``status: dropped`` drops it, both with
  Delta column mapping (tables are created with it; older tables are upgraded first);
* a feature's kind or dtype never changes: the plan refuses, asking for a new feature;
* deprecation changes no column: writes leave the feature null from ``deprecated_ds``.

Writes (the label join) apply new columns themselves and refuse pending renames and
drops, which change what readers see and so wait for ``features apply``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import DataType
from pyspark.errors import AnalysisException

from schemas.settings import COLUMN_MAPPING_MODE
from schemas.errors import RegistryError, TableError
from schemas.exit import first_line
from schemas.registry import KEY_COLUMNS, PARTITION_COLUMN, DatasetRegistry, Feature, Status
from schemas.spark import feature_type, table_schema
from warehouse.derived import validate_derived
from warehouse.catalog import SyncResult, catalog_features, feature_row, sync_features
from warehouse.tables import CONFLICTS, DATABASE, create_delta_sql, create_if_missing, table_name, table_properties



class Action(StrEnum):
    CREATE_TABLE = "create table"
    ENABLE_COLUMN_MAPPING = "enable column mapping"
    ADD_COLUMN = "add column"
    RENAME_COLUMN = "rename column"
    DROP_COLUMN = "drop column"
    DEPRECATE = "deprecate"
    REGISTER = "register"
    UPDATE = "update catalog"
    UNREGISTER = "unregister"


#: Changes a write applies by itself; the others wait for ``features apply``.
_AUTOMATIC = frozenset({Action.CREATE_TABLE, Action.ADD_COLUMN})
_TABLE_ACTIONS = frozenset(
    {Action.CREATE_TABLE, Action.ENABLE_COLUMN_MAPPING, Action.ADD_COLUMN, Action.RENAME_COLUMN, Action.DROP_COLUMN}
)
_SYMBOL = {
    Action.CREATE_TABLE: "+",
    Action.ENABLE_COLUMN_MAPPING: "^",
    Action.ADD_COLUMN: "+",
    Action.RENAME_COLUMN: "~",
    Action.DROP_COLUMN: "-",
    Action.DEPRECATE: "!",
    Action.REGISTER: "*",
    Action.UPDATE: "*",
    Action.UNREGISTER: "*",
}


@dataclass(frozen=True)
class Change:
    """One step of a plan: what it does to which feature, in words and (for tables) in SQL."""

    action: Action
    feature: str | None
    detail: str
    sql: str | None = None

    @property
    def touches_table(self) -> bool:
        return self.action in _TABLE_ACTIONS

    def format(self) -> str:
        return f"  {_SYMBOL[self.action]} {self.action.value:<22} {self.detail}"


@dataclass(frozen=True)
class Plan:
    """What applying a registry file to its table and the catalog would change."""

    registry: DatasetRegistry
    table: str
    table_exists: bool
    column_mapping: bool
    changes: tuple[Change, ...]
    unchanged: int

    @property
    def pending(self) -> tuple[Change, ...]:
        """Table changes a write may not apply by itself (renames, drops, the protocol upgrade)."""
        return tuple(c for c in self.changes if c.touches_table and c.action not in _AUTOMATIC)

    def format(self) -> str:
        head = f"features diff {self.registry.dataset}: {self.registry.source} -> {self.table}"
        if not self.changes:
            return f"{head}\n  no change ({self.unchanged} features as registered)"
        lines = [head, *(c.format() for c in self.changes), f"  = {self.unchanged} features unchanged"]
        return "\n".join(lines)


# --------------------------------------------------------------------------- planning (no Spark calls)


def check_type(feature: Feature, column: str, actual: DataType, registry: DatasetRegistry) -> None:
    """Refuse a table column whose type is not the feature's: kinds and dtypes never change."""
    wanted = feature_type(feature)
    if actual != wanted:
        raise RegistryError(
            f"{registry.source}: feature {feature.name!r} is {feature.kind.value} {feature.dtype.value} "
            f"({wanted.simpleString()}) but table column {column!r} is {actual.simpleString()}; a feature's kind and dtype "
            f"cannot change: add a new feature with a new name (and deprecate {feature.name!r}) instead"
        )


def _column_changes(
    registry: DatasetRegistry, table: str, columns: Mapping[str, DataType]
) -> tuple[list[Change], set[str]]:
    """Column adds, renames and drops; returns them and the features they concern."""
    changes: list[Change] = []
    accounted = {*KEY_COLUMNS, *registry.label_columns, PARTITION_COLUMN}
    missing_labels = [c for c in registry.label_columns if c not in columns]
    if missing_labels:
        raise RegistryError(
            f"{registry.source}: label columns {', '.join(missing_labels)} are not in table {table}; label types "
            "cannot be added to an existing table: revert the label change, or build a new dataset"
        )
    for feature in registry.features:
        name, old = feature.name, feature.renamed_from
        if not feature.stored:
            present = [c for c in (name, old) if c and c in columns]
            accounted.update(present)
            changes += [
                Change(Action.DROP_COLUMN, name, f"{c} (metadata only; its bytes stay in old files until rewritten)",
                       f"ALTER TABLE {table} DROP COLUMN `{c}`")
                for c in present
            ]  # fmt: skip
            continue
        if name in columns:
            if old and old in columns:
                raise RegistryError(
                    f"{registry.source}: feature {name!r} is renamed_from {old!r}, but table {table} has both "
                    f"columns; drop one (status: dropped on a feature of that name) or remove renamed_from"
                )
            check_type(feature, name, columns[name], registry)
            accounted.add(name)
        elif old and old in columns:
            check_type(feature, old, columns[old], registry)
            accounted.add(old)
            changes.append(Change(Action.RENAME_COLUMN, name, f"{old} -> {name} (metadata only, no file rewritten)",
                                  f"ALTER TABLE {table} RENAME COLUMN `{old}` TO `{name}`"))  # fmt: skip
        else:
            detail = f"{name} {feature_type(feature).simpleString()}" + (
                f" = {feature.derived} (past partitions read null until backfilled)" if feature.derived
                else " (past partitions read null)"
            )  # fmt: skip
            changes.append(
                Change(Action.ADD_COLUMN, name, detail,
                       f"ALTER TABLE {table} ADD COLUMNS (`{name}` {feature_type(feature).simpleString()})")
            )  # fmt: skip
    strays = sorted(set(columns) - accounted)
    if strays:
        raise RegistryError(
            f"{registry.source}: table {table} has columns {', '.join(strays)} that no feature of the registry "
            "names; put their features back, or keep them with lifecycle: {status: dropped} to drop the columns"
        )
    return changes, {c.feature for c in changes if c.feature}


def _catalog_changes(
    registry: DatasetRegistry, catalog: Mapping[str, Mapping[str, Any]], done: set[str]
) -> list[Change]:
    """Lifecycle and metadata changes against what the catalog last recorded."""
    if not catalog:
        return [Change(Action.REGISTER, None, f"{len(registry.features)} features (the catalog has none of {registry.dataset})")]
    changes: list[Change] = []
    for feature in registry.features:
        if feature.name in done:
            continue
        row, before = feature_row(registry, feature), catalog.get(feature.name)
        if before is None:
            changes.append(Change(Action.REGISTER, feature.name, f"{feature.name} ({feature.status.value})"))
        elif feature.status is Status.DEPRECATED and before["status"] != Status.DEPRECATED.value:
            changes.append(Change(
                Action.DEPRECATE, feature.name,
                f"{feature.name} from {feature.lifecycle.deprecated_ds} (column kept; writes leave it null from then on)",
            ))  # fmt: skip
        else:
            fields = [key for key, value in row.items() if before.get(key) != value]
            if fields:
                detail = ", ".join(f"{k} {before.get(k)!r} -> {row[k]!r}" for k in fields)
                if "derived" in fields:
                    detail += "; partitions written before keep the old values until backfilled"
                changes.append(Change(Action.UPDATE, feature.name, f"{feature.name}: {detail}"))
    known = {f.name for f in registry.features} | {f.renamed_from for f in registry.features if f.renamed_from}
    changes += [
        Change(Action.UNREGISTER, name, f"{name} (no longer in the registry)")
        for name in sorted(catalog) if name not in known
    ]  # fmt: skip
    return changes


def plan_changes(
    registry: DatasetRegistry,
    *,
    table: str,
    columns: Mapping[str, DataType] | None,
    column_mapping: bool,
    catalog: Mapping[str, Mapping[str, Any]],
) -> Plan:
    """The plan for ``registry`` against a table with ``columns`` (None: no table yet) and the catalog's rows.

    Raises :class:`RegistryError` for a change that cannot be applied (kind or
    dtype changed, a table column no feature names, a label type added).
    """
    if columns is None:
        stored = len(registry.stored_features)
        changes = [Change(Action.CREATE_TABLE, None, f"{table} with {stored} feature columns, column mapping on")]
        changes += _catalog_changes(registry, catalog, set())
        return Plan(registry, table, False, True, tuple(changes), 0)
    column_changes, done = _column_changes(registry, table, columns)
    if not column_mapping and any(c.action in (Action.RENAME_COLUMN, Action.DROP_COLUMN) for c in column_changes):
        column_changes.insert(0, Change(
            Action.ENABLE_COLUMN_MAPPING, None,
            f"{table}: Delta column mapping by name (protocol reader 2 / writer 5; readers need Delta >= 1.2)",
            f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.minReaderVersion' = '2', "
            f"'delta.minWriterVersion' = '5', '{COLUMN_MAPPING_MODE}' = 'name')",
        ))  # fmt: skip
    changes = column_changes + _catalog_changes(registry, catalog, done)
    touched = {c.feature for c in changes if c.feature}
    unchanged = sum(1 for f in registry.features if f.name not in touched) if catalog else 0
    return Plan(registry, table, True, column_mapping, tuple(changes), unchanged)


# --------------------------------------------------------------------------- Spark side


def table_state(spark: SparkSession, table: str) -> tuple[dict[str, DataType] | None, bool]:
    """The table's columns by name (None if it does not exist) and whether it uses column mapping."""
    if not spark.catalog.tableExists(table):
        return None, False
    columns = {f.name: f.dataType for f in spark.table(table).schema.fields}
    return columns, table_properties(spark, table).get(COLUMN_MAPPING_MODE, "none") == "name"


def make_plan(
    spark: SparkSession, registry: DatasetRegistry, *, database: str = DATABASE, with_catalog: bool = True
) -> Plan:
    """Compare ``registry`` with its table and (unless ``with_catalog`` is false) the catalog; change nothing."""
    table = table_name(registry.dataset, database=database)
    columns, mapping = table_state(spark, table)
    validate_derived(spark, registry)
    catalog = catalog_features(spark, registry.dataset) if with_catalog else {}
    return plan_changes(registry, table=table, columns=columns, column_mapping=mapping, catalog=catalog)


def create_table(spark: SparkSession, registry: DatasetRegistry, table: str) -> None:
    """Create the feature table from the registry, partitioned by ds, with column mapping by name."""
    create_if_missing(spark, table, lambda: spark.sql(create_delta_sql(
        table, table_schema(registry), partitioned_by=[PARTITION_COLUMN], properties={COLUMN_MAPPING_MODE: "name"},
        comment=registry.description or f"feature table of dataset {registry.dataset}",
    )))  # fmt: skip


def apply_table_changes(spark: SparkSession, the_plan: Plan, *, only_automatic: bool = False) -> list[Change]:
    """Run the plan's table changes in order (each one Delta commit); return those run."""
    done = []
    for change in the_plan.changes:
        if not change.touches_table or (only_automatic and change.action not in _AUTOMATIC):
            continue
        if change.action is Action.CREATE_TABLE:
            create_table(spark, the_plan.registry, the_plan.table)
        else:
            try:
                spark.sql(change.sql)
            except AnalysisException as err:
                raise TableError(
                    f"{change.action.value} on {the_plan.table} failed: {first_line(err)}; the changes before it are applied, "
                    f"so fix the cause and run featurehouse features apply --dataset {the_plan.registry.dataset} again"
                ) from err
        done.append(change)
    return done


def prepare_for_write(spark: SparkSession, registry: DatasetRegistry, *, database: str = DATABASE) -> tuple[str, list[Change]]:
    """Before a write: create the table or add new columns; refuse renames and drops not yet applied.

    Returns the table name and the changes made.
    """
    pending_plan = make_plan(spark, registry, database=database, with_catalog=False)
    if pending_plan.pending:
        listed = "; ".join(c.detail.split(" (")[0] for c in pending_plan.pending)
        raise TableError(
            f"registry {registry.source} has changes table {pending_plan.table} does not have yet ({listed}); "
            f"review them with `featurehouse features diff --dataset {registry.dataset}` and apply them with "
            f"`featurehouse features apply --dataset {registry.dataset}`"
        )
    try:
        return pending_plan.table, apply_table_changes(spark, pending_plan, only_automatic=True)
    except (TableError, AnalysisException, *CONFLICTS):
        # A concurrent writer (a label join of another ds) may have made the same change first:
        # plan again; if nothing is left to do, the table is ready, else the error stands.
        again = make_plan(spark, registry, database=database, with_catalog=False)
        if any(c.touches_table for c in again.changes):
            raise
        return again.table, []


@dataclass(frozen=True)
class ApplyResult:
    plan: Plan
    applied: tuple[Change, ...]
    sync: SyncResult

    def format(self) -> str:
        head = f"features apply {self.plan.registry.dataset}: {self.plan.registry.source} -> {self.plan.table}"
        if not self.plan.changes:
            return f"{head}\n  no change"
        lines = [head, *(c.format() for c in self.plan.changes)]
        lines.append(f"  applied {len(self.applied)} table changes; {self.sync.format()}")
        return "\n".join(lines)


def apply(spark: SparkSession, registry: DatasetRegistry, *, database: str = DATABASE) -> ApplyResult:
    """Apply the registry: every table change in order, then sync the catalog's ``features`` rows."""
    the_plan = make_plan(spark, registry, database=database)
    applied = apply_table_changes(spark, the_plan)
    return ApplyResult(the_plan, tuple(applied), sync_features(spark, registry))
