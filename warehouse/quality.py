"""The quality gate's checks: a Great Expectations suite generated from the registry, run on a partition.

    history = trailing_history(spark, "featurehouse.ads", registry, ds)   # the published days before ds
    report = validate(frame, registry, ds, history)                     # a Spark DataFrame of one partition
    report.success, report.summary_lines(), report.as_json()

The suite (Great Expectations 1.x, built in code, one per dataset and ds) checks:

* keys: ``impression_id`` non-null and unique;
* labels: every ``label_*`` in {0, 1}, and its positive rate within ``positive_rate_tolerance``
  of the mean rate of the last ``history_days`` published partitions, where those partitions
  average at least ``min_expected_positives`` positives (below that the rate is noise);
* rows: at least ``min_rows`` and within ``row_count_tolerance`` of the history's mean;
* features filled on ds (added by then, not deprecated): coverage (non-null share) at least ``min_coverage`` (the feature's or
  the dataset's), dense values within a declared ``range``, sparse lists no longer than a
  declared ``max_length`` (checked on the ``size()`` of the list).

How it runs: every metric the suite needs is one aggregate of a single Spark job over the
(persisted) partition, plus one small job over the key column for uniqueness; each expectation
then judges its metrics with Great Expectations' own rules (:func:`_judge`). Only failed
expectations are validated again by Great Expectations on Spark, for the examples in the report.

Without history (the first partitions) the row and rate bounds are skipped, and the report says so.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schemas.names import format_ds
from schemas.registry import KEY_COLUMNS, DatasetRegistry, Kind
from schemas.sql_text import identifier, literal


if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LENGTH_PREFIX = "__length_of_"



def import_ahead() -> None:
    """Import Great Expectations in a thread of its own (2.5-3 s of Python on this machine, once per process), so
    that a job overlaps it with its Spark work before the gate: the import is CPU, the Spark work mostly waiting
    on the JVM or the engine. The gate's own import then finds the modules loaded (or waits for the thread)."""
    if "great_expectations" not in sys.modules:
        threading.Thread(target=importlib.import_module, args=("great_expectations",), daemon=True,
                         name="import-great-expectations").start()  # fmt: skip

@dataclass(frozen=True)
class History:
    """The published partitions before a ds: their mean row count and each label's mean positive rate."""

    days: tuple[str, ...] = ()
    rows: float | None = None
    rates: dict[str, float] = field(default_factory=dict)  # label column -> rate


@dataclass(frozen=True)
class DayCounts:
    """One partition's row count and each label's mean (its positive rate): what a history is made of."""

    rows: int
    rates: dict[str, float | None]  # label column -> mean; None: no non-null label


def published_days(spark: SparkSession, table: str, registry: DatasetRegistry, start: dt.date,
                   end: dt.date) -> dict[str, DayCounts]:  # fmt: skip
    """The :class:`DayCounts` of ``table``'s partitions with ``start <= ds < end`` (labels only read; one Spark job)."""
    if not spark.catalog.tableExists(table):
        return {}
    from pyspark.sql import functions as F

    columns = [label.column for label in registry.labels]
    rows = (
        spark.table(table)
        .where((F.col("ds") >= format_ds(start)) & (F.col("ds") < format_ds(end)))
        .groupBy("ds")
        .agg(F.count(F.lit(1)).alias("rows"), *(F.avg(c).alias(c) for c in columns))
        .collect()
    )
    return {r["ds"]: DayCounts(int(r["rows"]), {c: r[c] for c in columns}) for r in rows}


def history_before(days: Mapping[str, DayCounts], registry: DatasetRegistry, ds: dt.date) -> History:
    """The :class:`History` of ``ds`` from ``days``: those of the ``history_days`` before it, in ds order."""
    start, end = format_ds(ds - dt.timedelta(days=registry.quality.history_days)), format_ds(ds)
    chosen = tuple(d for d in sorted(days) if start <= d < end)
    window = [days[d] for d in chosen]
    if not window:
        return History()
    return History(
        days=chosen,
        rows=sum(day.rows for day in window) / len(window),
        rates={c: sum(float(day.rates.get(c) or 0.0) for day in window) / len(window) for c in registry.label_columns},
    )


def trailing_history(spark: SparkSession, table: str, registry: DatasetRegistry, ds: dt.date) -> History:
    """Row counts and label rates of ``table``'s partitions in the ``history_days`` before ``ds`` (labels only read)."""
    start = ds - dt.timedelta(days=registry.quality.history_days)
    return history_before(published_days(spark, table, registry, start, ds), registry, ds)


def _between(mean: float, tolerance: float) -> tuple[float, float]:
    return mean * (1 - tolerance), mean * (1 + tolerance)


def expectations(registry: DatasetRegistry, ds: dt.date, history: History) -> list[Any]:
    """The Great Expectations expectations a partition ``ds`` of ``registry``'s dataset must meet."""
    import great_expectations as gx

    e = gx.expectations
    q = registry.quality
    why = lambda text: {"why": text}  # noqa: E731
    key = KEY_COLUMNS[0]
    out = [
        e.ExpectColumnValuesToNotBeNull(column=key, meta=why("every row has its key")),
        e.ExpectColumnValuesToBeUnique(column=key, meta=why("no impression twice")),
    ]
    for label in registry.labels:
        out.append(e.ExpectColumnValuesToBeInSet(column=label.column, value_set=[0, 1], meta=why("labels are 0 or 1")))
        rate = history.rates.get(label.column)
        if rate is not None and history.rows is not None and rate * history.rows >= q.min_expected_positives:
            lo, hi = _between(rate, q.positive_rate_tolerance)
            out.append(e.ExpectColumnMeanToBeBetween(
                column=label.column, min_value=lo, max_value=hi,
                meta=why(f"positive rate within {q.positive_rate_tolerance:.0%} of the last {len(history.days)} "
                         f"partitions' {rate:.5f}"),
            ))  # fmt: skip
    if history.rows is not None:
        lo, hi = _between(history.rows, q.row_count_tolerance)
        out.append(e.ExpectTableRowCountToBeBetween(
            min_value=max(q.min_rows, int(lo)), max_value=int(hi) + 1,
            meta=why(f"rows within {q.row_count_tolerance:.0%} of the last {len(history.days)} partitions' "
                     f"{history.rows:,.0f}"),
        ))  # fmt: skip
    else:
        out.append(e.ExpectTableRowCountToBeBetween(min_value=q.min_rows, meta=why("at least min_rows rows")))
    for feature in registry.stored_features:
        added = feature.lifecycle.added_ds
        if not feature.populated_on(ds) or (added is not None and added > ds):
            continue  # not filled on ds: added later, or deprecated by then
        fq = feature.quality
        coverage = fq.min_coverage if fq.min_coverage is not None else q.min_coverage
        if coverage > 0:
            out.append(e.ExpectColumnValuesToNotBeNull(column=feature.name, mostly=coverage,
                                                       meta=why(f"coverage at least {coverage:.0%}")))  # fmt: skip
        if fq.range is not None:
            out.append(e.ExpectColumnValuesToBeBetween(column=feature.name, min_value=fq.range[0],
                                                       max_value=fq.range[1], meta=why("declared range")))  # fmt: skip
        if fq.max_length is not None and feature.kind is not Kind.DENSE:
            out.append(e.ExpectColumnMaxToBeBetween(column=LENGTH_PREFIX + feature.name, max_value=fq.max_length,
                                                    meta=why(f"lists of {feature.name} at most {fq.max_length} long")))  # fmt: skip
    return out


@dataclass(frozen=True)
class Check:
    """One expectation's outcome, readable."""

    expectation: str
    column: str | None
    success: bool
    why: str
    observed: str

    def line(self) -> str:
        verdict = "passed" if self.success else "FAILED"
        column = f" {self.column}" if self.column else ""
        observed = f": {self.observed}" if self.observed else ""
        return f"{verdict} {self.expectation}{column} ({self.why}){observed}"


def _observed(result: dict[str, Any]) -> str:
    """What was observed, from a ``SUMMARY`` result (a passed check's ``BOOLEAN_ONLY`` result has none)."""
    if "observed_value" in result:
        return f"observed {result['observed_value']!r}"
    if "unexpected_count" in result:
        sample = result.get("partial_unexpected_list") or []
        shown = f", e.g. {sample[:3]!r}" if sample else ""
        total, missing = result.get("element_count", 0), result.get("missing_count") or 0
        of = f"{total:,} rows" if not missing else f"{total - missing:,} non-null values"  # nulls are not checked
        return f"{result['unexpected_count']:,} of {of} unexpected ({result.get('unexpected_percent', 0.0):.2f}%){shown}"
    return ""


@dataclass(frozen=True)
class QualityReport:
    dataset: str
    ds: str
    success: bool
    checks: tuple[Check, ...]
    history_days: tuple[str, ...]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)  # Great Expectations' own result, as JSON
    rows: int = 0  # rows of the partition, from the same pass
    label_sums: dict[str, int] = field(default_factory=dict)  # label column -> positives, from the same pass

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.success)

    def summary_lines(self) -> list[str]:
        """One line per failed expectation (none when all passed), then the count."""
        lines = [c.line() for c in self.failures]
        history = f"history {self.history_days[0]} .. {self.history_days[-1]}" if self.history_days else "no history"
        lines.append(f"{self.dataset} ds={self.ds}: {len(self.checks) - len(self.failures)} of {len(self.checks)} "
                     f"expectations passed ({history})")  # fmt: skip
        return lines

    def as_json(self) -> str:
        return json.dumps({
            "dataset": self.dataset, "ds": self.ds, "success": self.success, "history_days": list(self.history_days),
            "checks": [vars(c) for c in self.checks], "great_expectations": self.raw,
        }, indent=2, default=str)  # fmt: skip


#: Great Expectations judges on the counts alone; the observations of a failure come from a second run.
_BOOLEAN_ONLY = {"result_format": "BOOLEAN_ONLY"}
_UNIQUE = "column_values.unique.unexpected_count"


def _metric_column(metric: str, column: str | None, value_kwargs: dict[str, Any]) -> str | None:
    """The Spark aggregate of one Great Expectations metric, as GX's Spark engine defines it, in SQL text
    (``schemas/sql_text.py``; None: not an aggregate).

    Map metrics count the non-null values that fail the condition; a ``__length_of_`` column is the
    size of its list column, computed here rather than added to the frame.
    """
    if metric == "table.row_count":
        return "count(1)"
    if column is None:
        return None
    value = f"size({identifier(column.removeprefix(LENGTH_PREFIX))})" if column.startswith(LENGTH_PREFIX) \
        else identifier(column)  # fmt: skip
    if metric == "column_values.nonnull.unexpected_count":
        return f"count_if({value} IS NULL)"
    if metric == "column_values.in_set.unexpected_count":
        allowed = list(value_kwargs["value_set"])
        return f"count_if({value} IS NOT NULL AND NOT ({value} IN ({', '.join(map(literal, allowed))})))" if allowed \
            else f"count_if({value} IS NOT NULL)"  # fmt: skip
    if metric == "column_values.between.unexpected_count":
        lo, hi = value_kwargs.get("min_value"), value_kwargs.get("max_value")
        inside = ["TRUE"]
        if lo is not None:
            inside.append(f"{value} {'>' if value_kwargs.get('strict_min') else '>='} {literal(lo)}")
        if hi is not None:
            inside.append(f"{value} {'<' if value_kwargs.get('strict_max') else '<='} {literal(hi)}")
        return f"count_if({value} IS NOT NULL AND NOT ({' AND '.join(inside)}))"
    if metric in _COLUMN_AGGREGATES:
        return f"{_COLUMN_AGGREGATES[metric]}({value})"
    return None


_COLUMN_AGGREGATES = {"column.mean": "avg", "column.max": "max", "column.min": "min"}


def _metric_key(metric: str, column: str | None, value_kwargs: dict[str, Any]) -> str:
    return json.dumps([metric, column if metric != "table.row_count" else None, value_kwargs], sort_keys=True,
                      default=str)  # fmt: skip


@dataclass(frozen=True)
class _Plan:
    """What a suite's verdicts need: each expectation's metric keys, the aggregates (SQL text) that compute them,
    and the columns whose key uniqueness is counted."""

    needs: list[tuple[Any, dict[str, str]]]
    aggregates: dict[str, str]
    unique_columns: set[str]


def _plan(suite: list[Any]) -> _Plan:
    needs: list[tuple[Any, dict[str, str]]] = []
    aggregates: dict[str, str] = {}
    unique_columns: set[str] = set()
    for expectation in suite:
        column = getattr(expectation, "column", None)
        configs = expectation.get_validation_dependencies(runtime_configuration=_BOOLEAN_ONLY).metric_configurations
        keys: dict[str, str] = {}
        for name, config in configs.items():
            value_kwargs = dict(config.metric_value_kwargs or {})
            key = _metric_key(config.metric_name, column, value_kwargs)
            keys[name] = key
            if config.metric_name == _UNIQUE:
                unique_columns.add(column)
                continue
            if key not in aggregates:
                aggregate = _metric_column(config.metric_name, column, value_kwargs)
                if aggregate is None:
                    raise NotImplementedError(f"metric {config.metric_name} of {type(expectation).__name__} has no "
                                              "one-pass aggregate in warehouse/quality.py; add one")  # fmt: skip
                aggregates[key] = aggregate
        needs.append((expectation, keys))
    return _Plan(needs, aggregates, unique_columns)


def _verdicts(plan: _Plan, values: Mapping[str, Any]) -> list[tuple[Any, bool]]:
    """Each expectation of the plan with Great Expectations' own verdict on the metric ``values``."""
    verdicts = []
    for expectation, keys in plan.needs:
        outcome = expectation._validate(metrics={name: values[key] for name, key in keys.items()},
                                        runtime_configuration=_BOOLEAN_ONLY)  # fmt: skip
        success = outcome["success"] if isinstance(outcome, dict) else outcome.success
        verdicts.append((expectation, bool(success)))
    return verdicts


def _aggregate_columns(aggregates: Mapping[str, str], extra: Mapping[str, str]) -> list[Any]:
    """The metric aggregates (``m<i>``) and the caller's (``x<i>``) as columns of one ``agg``."""
    from pyspark.sql import functions as F

    return [*(F.expr(f"{text} AS m{i}") for i, text in enumerate(aggregates.values())),
            *(F.expr(f"{text} AS x{i}") for i, text in enumerate(extra.values()))]  # fmt: skip


def _read_aggregates(row: Any, aggregates: Mapping[str, str], extra: Mapping[str, str]) -> tuple[dict, dict]:
    """A row of :func:`_aggregate_columns` back as (metric key -> value, extra name -> value)."""
    return ({k: row[f"m{i}"] for i, k in enumerate(aggregates)}, {n: row[f"x{i}"] for i, n in enumerate(extra)})


def _judge(frame: DataFrame, suite: list[Any], extra: dict[str, str]) -> tuple[list[tuple[Any, bool]], dict[str, Any]]:
    """Each expectation of ``suite`` with Great Expectations' verdict on ``frame``, from one pass over it.

    Every metric the expectations depend on (row count, null counts, counts outside a set or a
    range, means, maxima) is one aggregate of a single Spark job; key uniqueness is a second, small
    job over the key column alone. Each expectation then judges its metrics with its own
    ``_validate`` (mostly, strict bounds, vacuous truth: Great Expectations' rules, not ours).
    ``extra``: more aggregates for the caller (SQL text), computed in the same job; their values are returned.
    """
    from pyspark.sql import functions as F

    plan = _plan(suite)
    values, extras = _read_aggregates(frame.agg(*_aggregate_columns(plan.aggregates, extra)).first(),
                                      plan.aggregates, extra)  # fmt: skip
    for column in sorted(plan.unique_columns):
        repeated = (frame.where(F.col(column).isNotNull()).groupBy(column).count().where(F.col("count") > 1)
                    .agg(F.coalesce(F.sum("count"), F.lit(0)).alias("n")).first())  # fmt: skip
        values[_metric_key(_UNIQUE, column, {})] = int(repeated["n"])
    return _verdicts(plan, values), extras


@dataclass(frozen=True)
class DayMetrics:
    """Every metric any suite of one ds can need (metric key -> value), and the report's counts (rows, label sums)."""

    values: dict[str, Any]
    counts: dict[str, Any]

    def day_counts(self, registry: DatasetRegistry) -> DayCounts:
        """What the partition adds to the history of the days after it, once published (as the table would say)."""
        return DayCounts(int(self.counts["rows"]),
                         {c: self.values[_metric_key("column.mean", c, {})] for c in registry.label_columns})  # fmt: skip


def _counts(registry: DatasetRegistry) -> dict[str, str]:
    """The report's counts as aggregates (SQL text): the rows and each label's positives."""
    return {"rows": "count(1)", **{c: f"coalesce(sum({identifier(c)}), 0)" for c in registry.label_columns}}


def metrics_by_day(frame: DataFrame, registry: DatasetRegistry, days: Sequence[dt.date]) -> dict[str, DayMetrics]:
    """The metrics of the partitions ``days`` of ``frame`` (rows of several ds, persisted), in one pass for them all.

    One aggregate grouped by ``ds`` computes every metric that a suite of any of ``days`` can need,
    whatever its history (the suites differ by history only in their bounds, and by ds in which features
    are filled), plus one job for key uniqueness. :func:`judge` then judges each ds from its metrics with
    the history the days before it leave, as :func:`validate` would on that ds's rows alone.
    """
    from pyspark.sql import functions as F

    # a history under which every conditional expectation is in the suite (rate bounds need enough expected positives)
    rated = History(days=("",), rows=float(2**62), rates={c: 0.5 for c in registry.label_columns})
    aggregates: dict[str, str] = {}
    unique_columns: set[str] = set()
    for day in days:
        plan = _plan(expectations(registry, day, rated))
        aggregates.update(plan.aggregates)
        unique_columns |= plan.unique_columns
    counts = _counts(registry)
    grouped = frame.groupBy("ds").agg(*_aggregate_columns(aggregates, counts)).collect()
    out = {r["ds"]: DayMetrics(*_read_aggregates(r, aggregates, counts)) for r in grouped}
    for column in sorted(unique_columns):
        repeated = (frame.where(F.col(column).isNotNull()).groupBy("ds", column).count().where(F.col("count") > 1)
                    .groupBy("ds").agg(F.sum("count").alias("n")).collect())  # fmt: skip
        found = {r["ds"]: int(r["n"]) for r in repeated}
        for ds, metrics in out.items():
            metrics.values[_metric_key(_UNIQUE, column, {})] = found.get(ds, 0)
    missing = sorted(set(map(format_ds, days)) - out.keys())
    if missing:
        raise ValueError(f"no rows of ds {', '.join(missing)} to judge; judge only days with rows")
    return out


def validate(frame: DataFrame, registry: DatasetRegistry, ds: dt.date, history: History) -> QualityReport:
    """Run the generated suite on ``frame`` (one partition of ``registry``'s dataset), judged by Great Expectations.

    ``frame`` should be materialised (persisted) by the caller: it is read once for every metric
    (:func:`_judge`), and again only if something failed, when Great Expectations validates the
    failed expectations itself with ``SUMMARY`` results so that the report says what was observed
    (counts, examples of unexpected values).
    """
    return validate_with(frame, registry, ds, history, extra={})[0]


def validate_with(frame: DataFrame, registry: DatasetRegistry, ds: dt.date, history: History, *,
                  extra: Mapping[str, str]) -> tuple[QualityReport, dict[str, Any]]:  # fmt: skip
    """:func:`validate`, and the caller's ``extra`` aggregates of ``frame`` (name -> SQL text) in the same pass:
    the report and the extras' values by name. ``frame`` may hold columns of the caller's beside the partition's."""
    suite = expectations(registry, ds, history)
    counts = _counts(registry)
    verdicts, values = _judge(frame, suite, {**counts, **{f"extra {name}": text for name, text in extra.items()}})
    report = _report(frame, registry, ds, history, verdicts, {name: values[name] for name in counts})
    return report, {name: values[f"extra {name}"] for name in extra}


def judge(frame: DataFrame, registry: DatasetRegistry, ds: dt.date, history: History,
          metrics: DayMetrics) -> QualityReport:  # fmt: skip
    """:func:`validate`'s report on ``frame`` (one partition), from its :func:`metrics_by_day` instead of a pass of
    its own: the same suite and verdicts. ``frame`` is read only if an expectation failed, for the report's details."""
    suite = expectations(registry, ds, history)
    return _report(frame, registry, ds, history, _verdicts(_plan(suite), metrics.values), metrics.counts)


def _report(frame: DataFrame, registry: DatasetRegistry, ds: dt.date, history: History,
            verdicts: list[tuple[Any, bool]], counted: Mapping[str, Any]) -> QualityReport:  # fmt: skip
    """The report of the verdicts; a failed expectation is validated again by Great Expectations on ``frame``, with
    ``SUMMARY`` results, so that the report says what was observed."""
    import great_expectations as gx
    from great_expectations.core import ExpectationValidationResult
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from pyspark.sql import functions as F

    failed = [e for e, success in verdicts if not success]
    details = {}
    if failed:
        context = gx.get_context(mode="ephemeral")  # before the suites: Great Expectations binds suites to it
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        name = f"{registry.dataset}_{format_ds(ds)}_failed"
        again = gx.ExpectationSuite(name=name)
        for expectation in failed:
            again.add_expectation_configuration(expectation.configuration)
        lengths = [F.size(F.col(c.removeprefix(LENGTH_PREFIX))).alias(c) for c in
                   {e.column for e in failed if (getattr(e, "column", None) or "").startswith(LENGTH_PREFIX)}]  # fmt: skip
        asset = context.data_sources.add_spark(name="featurehouse").add_dataframe_asset(name=registry.dataset)
        batch = asset.add_batch_definition_whole_dataframe("partition").get_batch(
            batch_parameters={"dataframe": frame.select("*", *lengths)})
        details = {_key(r.expectation_config): r for r in batch.validate(again, result_format="SUMMARY").results}
    results = [
        details.get(_key(e.configuration))
        or ExpectationValidationResult(success=success, expectation_config=e.configuration, result={})
        for e, success in verdicts
    ]
    checks = tuple(
        Check(
            expectation=r.expectation_config.type,
            column=r.expectation_config.kwargs.get("column"),
            success=bool(success),
            why=(r.expectation_config.meta or {}).get("why", ""),
            observed=_observed(r.result or {}),
        )
        for r, (_e, success) in zip(results, verdicts, strict=True)
    )
    success = not failed
    raw = {
        "success": success,
        "statistics": {"evaluated_expectations": len(checks), "successful_expectations": len(checks) - len(failed),
                       "unsuccessful_expectations": len(failed)},
        "metrics": "one Spark aggregate (warehouse/quality.py), judged by each expectation",
        "results": [r.to_json_dict() for r in results],
    }  # fmt: skip
    return QualityReport(registry.dataset, format_ds(ds), success, checks, history.days, raw, rows=int(counted["rows"]),
                         label_sums={c: int(counted[c]) for c in registry.label_columns})  # fmt: skip


def _key(config: Any) -> str:
    """An expectation's identity across two validations: its type and arguments."""
    kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
    return json.dumps([config.type, kwargs], sort_keys=True, default=str)
