"""Feature values for the generator (``etl/generate/job.py``), planned from each feature's name.

Any registry works: a dense feature's shape comes from its name (``_ctr``/``ratio``/...
rates in [0, 1], ``_clicks``/``_count``/... heavy-tailed counts, ``_ms``/``price``/...
log-normal amounts, ``_sin``/``_cos`` of the request hour or weekday, ``position``,
else N(0, 1)), and so does what it sees of the world (``etl/generate/world.py``):

* ``user_ctr*``/``user_clicks*``: z_user, noisier over short windows (``_1d`` vs ``_28d``);
* ``item_ctr*``/``item_clicks*``: z_item; ``item_cvr*``: the conversion driver;
* ``*affinity*``/``*cosine*``: whether the item's topic is among the user's top topics;
* ``predicted_ctr*``/``predicted_cvr*``: the true logits plus noise; ``position``: the
  position; ``item_*price``: the item's price;
* sparse ``user_*topic*``: the user's top topics (weighted: with interest weights),
  ``item_*topic*``: the item's topic (and maybe a second one), ``item_*categor*``: the
  item's category path, ``item_*brand*``: its brand; other single ids (``_id``, ``_type``)
  of users, items, advertisers and campaigns are stable per user or item.

Everything else is noise of a plausible shape. Each feature is missing at a rate in
[0, 15%) (mostly an omitted key, sometimes null) and draws from a generator of its own,
so adding a feature to a registry does not change the others' values.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import zlib
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from etl.generate.jsonl import Column
from etl.generate.world import (
    MS_PER_DAY,
    N_BRANDS,
    N_CATEGORIES,
    N_TOPICS,
    TOP_TOPICS,
    W_CONV_ITEM,
    W_CONV_PRICE,
    Impressions,
    World,
    sigmoid,
    zipf_ranks,
)  # fmt: skip
from schemas.registry import DatasetRegistry, Feature, Kind

MAX_MISSING = 0.15


class Family(StrEnum):
    """The shape of a dense feature's values, chosen from its name."""

    CYCLIC = "cyclic"
    POSITION = "position"
    RATE = "rate"
    COUNT = "count"
    AMOUNT = "amount"
    NORMAL = "normal"


class Signal(StrEnum):
    """Which part of the latent state a feature sees."""

    NONE = "none"
    USER = "user"
    ITEM = "item"
    MATCH = "match"
    CONVERSION = "conversion"
    CLICK_ESTIMATE = "click_estimate"
    CONVERSION_ESTIMATE = "conversion_estimate"
    PRICE = "price"


class Source(StrEnum):
    """Where a sparse feature's ids come from."""

    USER_TOPICS = "user_topics"
    ITEM_TOPICS = "item_topics"
    ITEM_CATEGORY = "item_category"
    ITEM_BRAND = "item_brand"
    ITEM_KEYED = "item_keyed"
    USER_KEYED = "user_keyed"
    RANDOM = "random"


_FAMILY_PATTERNS: tuple[tuple[Family, str], ...] = (
    (Family.CYCLIC, r"_(sin|cos)$"),
    (Family.POSITION, r"position"),
    (Family.RATE, r"_ctr|_cvr|ratio|affinity|cosine|relevance|score|utilization|predicted_"),
    (Family.COUNT, r"_impressions|_clicks|_conversions|_count|_days|review"),
    (Family.AMOUNT, r"_ms|seconds_|price|spend|amount|width|bid"),
)
_SIGNAL_PATTERNS: tuple[tuple[Signal, str], ...] = (
    (Signal.CLICK_ESTIMATE, r"predicted_ctr"),
    (Signal.CONVERSION_ESTIMATE, r"predicted_cvr"),
    (Signal.USER, r"^user_(ctr|clicks)"),
    (Signal.ITEM, r"^item_(ctr|clicks)"),
    (Signal.CONVERSION, r"^item_cvr"),
    (Signal.MATCH, r"affinity|cosine"),
    (Signal.PRICE, r"^item_.*price$"),
)
_COUNT_PER_DAY = (("_clicks", (0.05, 1.0)), ("_conversions", (0.005, 0.1)), ("_impressions", (5.0, 60.0)))
_AMOUNT_RANGE = (("_ms", (50.0, 800.0)), ("seconds_since", (60.0, 86_400.0)), ("seconds", (5.0, 300.0)),
                 ("price", (5.0, 100.0)))  # fmt: skip


@dataclass(frozen=True)
class DensePlan:
    """How one dense feature is drawn: its shape, what it sees, how noisy and how often missing."""

    name: str
    family: Family
    signal: Signal
    noise: float
    loc: float
    scale: float
    cap: float
    missing: float
    null_share: float


@dataclass(frozen=True)
class SparsePlan:
    """How one sparse or weighted-sparse feature is drawn."""

    name: str
    kind: Kind
    source: Source
    single: bool
    vocab: int
    mean_length: float
    empty: float
    multiplier: int
    missing: float
    null_share: float


def feature_rng(seed: int, name: str, day: dt.date | None = None) -> np.random.Generator:
    """A generator of its own for each (seed, feature, day), so a feature's values do not
    change when other features are added to or removed from the registry."""
    return np.random.default_rng([seed, zlib.crc32(name.encode()), day.toordinal() if day else 0])


def dense_plan(feature: Feature, seed: int) -> DensePlan:
    name, rng = feature.name, feature_rng(seed, feature.name)
    family = next((f for f, pattern in _FAMILY_PATTERNS if re.search(pattern, name)), Family.NORMAL)
    signal = next((s for s, pattern in _SIGNAL_PATTERNS if re.search(pattern, name)), Signal.NONE)
    window = re.search(r"_(\d+)d(_|$)", name)
    days = int(window.group(1)) if window else 0
    noise = 2.0 / math.sqrt(days) if days else (1.0 if signal is Signal.MATCH else 0.75)
    loc, scale = 0.0, 1.0
    if family is Family.RATE:
        if "ctr" in name or "cvr" in name:
            loc, scale = math.log(0.03 / 0.97) if "ctr" in name else math.log(0.1 / 0.9), 0.8
        else:
            loc, scale = rng.uniform(-1.5, 1.5), rng.uniform(0.4, 1.2)
    elif family is Family.COUNT:  # mean per day of the window, or overall
        per_day = next((r for key, r in _COUNT_PER_DAY if key in name), (0.5, 5.0))
        mean = rng.uniform(*per_day) * days if days else rng.uniform(1.0, 300.0)
        loc, scale = math.log(mean), rng.uniform(0.8, 1.5)
    elif family is Family.AMOUNT:
        low, high = next((r for key, r in _AMOUNT_RANGE if key in name), (1.0, 500.0))
        loc, scale = math.log(rng.uniform(low, high)), rng.uniform(0.4, 1.2)
    cap = float(days) if family is Family.COUNT and days and "_days" in name else math.inf  # active_days_28d <= 28
    missing, null_share = rng.uniform(0, MAX_MISSING), rng.uniform(0.1, 0.4)
    return DensePlan(name, family, signal, noise, loc, scale, cap, missing, null_share)


def sparse_plan(feature: Feature, seed: int) -> SparsePlan:
    name, rng = feature.name, feature_rng(seed, feature.name)
    prefix = name.split("_", 1)[0]
    single = feature.kind is Kind.SPARSE and bool(re.search(r"_(id|type)$", name))
    if "topic" in name and prefix in ("user", "item"):
        source, vocab = (Source.USER_TOPICS if prefix == "user" else Source.ITEM_TOPICS), N_TOPICS
    elif "categor" in name and prefix == "item":
        source, vocab = Source.ITEM_CATEGORY, N_CATEGORIES
    elif "brand" in name and prefix == "item":
        source, vocab = Source.ITEM_BRAND, N_BRANDS
    else:
        keyed = Source.USER_KEYED if prefix == "user" else Source.ITEM_KEYED
        source = keyed if single and prefix in ("user", "item", "advertiser", "campaign", "ad") else Source.RANDOM
        vocab = int(10 ** rng.uniform(3, 6))
    high = 10.0 if feature.kind is Kind.WEIGHTED_SPARSE else 30.0
    mean_length = math.exp(rng.uniform(math.log(2.0), math.log(high)))
    multiplier = int(rng.integers(vocab // 3 + 1, vocab + 1))
    while math.gcd(multiplier, vocab) != 1:
        multiplier += 1
    return SparsePlan(
        name, feature.kind, source, single, vocab, mean_length, rng.uniform(0.0, 0.08), multiplier,
        rng.uniform(0, MAX_MISSING), rng.uniform(0.1, 0.4),
    )  # fmt: skip

def plan_features(
    registry: DatasetRegistry, seed: int, day: dt.date | None = None
) -> tuple[DensePlan | SparsePlan, ...]:
    """A plan per feature the serving system logs on ``day``, in registry order.

    Derived and dropped features are not logged; a feature with a later ``added_ds``
    is not logged yet; deprecated features still are (the label join leaves them
    null). A renamed feature is logged under its old key, as serving systems keep
    theirs when the warehouse renames a column.
    """
    plans = []
    for f in registry.logged_features:
        if day is not None and f.lifecycle.added_ds is not None and day < f.lifecycle.added_ds:
            continue
        logged = f if f.renamed_from is None else f.model_copy(update={"name": f.renamed_from})
        plans.append(dense_plan(logged, seed) if f.kind is Kind.DENSE else sparse_plan(logged, seed))
    return tuple(plans)


def hash_uniform(keys: np.ndarray, salt: int) -> np.ndarray:
    """A uniform in [0, 1) that depends only on (key, salt): stable ids per user or item."""
    x = (keys.astype(np.uint64) + np.uint64(salt & 0xFFFFFFFF)) * np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(29)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(32)
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _missing(plan: DensePlan | SparsePlan, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    missing = rng.random(n) < plan.missing
    null = missing & (rng.random(n) < plan.null_share)
    return missing & ~null, null


def dense_column(world: World, imp: Impressions, plan: DensePlan) -> Column:
    """One dense feature for the day's impressions."""
    rng, n = feature_rng(world.seed, plan.name, imp.day), imp.n
    if plan.signal is Signal.CLICK_ESTIMATE:
        values = sigmoid(imp.click_logit + rng.normal(0.0, 0.5, n))
    elif plan.signal is Signal.CONVERSION_ESTIMATE:
        values = sigmoid(imp.conv_logit + rng.normal(0.0, 0.5, n))
    elif plan.family is Family.POSITION:
        values = imp.position.astype(np.float64)
    elif plan.family is Family.CYCLIC:
        of_day = (imp.time_ms % MS_PER_DAY) / MS_PER_DAY
        cycle = of_day if "hour" in plan.name or not re.search("day|week", plan.name) else (imp.day.weekday() + of_day) / 7
        values = (np.sin if plan.name.endswith("_sin") else np.cos)(2 * np.pi * cycle)
    elif plan.signal is Signal.PRICE:
        values = world.item_price[imp.item]
    else:
        signal = {
            Signal.USER: lambda: world.z_user[imp.user],
            Signal.ITEM: lambda: world.z_item[imp.item],
            Signal.MATCH: lambda: (imp.match - imp.match.mean()) / (imp.match.std() or 1.0),
            Signal.CONVERSION: lambda: world.conv_driver[imp.item] / math.hypot(W_CONV_ITEM, W_CONV_PRICE),
        }.get(plan.signal)
        x = rng.standard_normal(n)
        if signal is not None:
            x = (signal() + plan.noise * x) / math.sqrt(1.0 + plan.noise**2)
        latent = plan.loc + plan.scale * x
        if plan.family is Family.RATE:
            values = sigmoid(latent)
        elif plan.family is Family.COUNT:
            values = np.minimum(rng.poisson(np.exp(np.minimum(latent, 20.0))), plan.cap).astype(np.float64)
        elif plan.family is Family.AMOUNT:
            values = np.exp(np.minimum(latent, 30.0))
        else:
            values = latent
    omit, null = _missing(plan, rng, n)
    return Column(plan.name, Kind.DENSE, values, omit, null)


def sparse_column(world: World, imp: Impressions, plan: SparsePlan) -> Column:
    """One sparse or weighted-sparse feature for the day's impressions."""
    rng, n = feature_rng(world.seed, plan.name, imp.day), imp.n
    weights = None
    if plan.source is Source.USER_TOPICS:
        ids, lengths = world.user_topics[imp.user].ravel(), np.full(n, TOP_TOPICS)
        weights = world.user_topic_weight[imp.user].ravel()
    elif plan.source is Source.ITEM_TOPICS:
        second = world.item_topic2[imp.item]
        pairs = np.stack([world.item_topic[imp.item], second], axis=1)
        keep = np.stack([np.ones(n, bool), second >= 0], axis=1)
        ids, lengths = pairs[keep], keep.sum(axis=1)
        weights = np.stack([rng.uniform(0.5, 1.0, n), rng.uniform(0.05, 0.5, n)], axis=1)[keep]
    elif plan.source is Source.ITEM_CATEGORY:
        leaf = world.item_category[imp.item]  # a path root -> mid -> leaf, ids in disjoint ranges
        path = np.stack([leaf // 100, 10 + leaf // 10, 110 + leaf], axis=1)
        ids, lengths = (leaf, np.ones(n, np.int64)) if plan.single else (path.ravel(), np.full(n, 3))
    elif plan.source is Source.ITEM_BRAND:
        ids, lengths = world.item_brand[imp.item], np.ones(n, np.int64)
    else:
        if plan.source is Source.RANDOM:
            lengths = np.ones(n, np.int64) if plan.single else rng.poisson(plan.mean_length, n)
            if not plan.single:
                lengths[rng.random(n) < plan.empty] = 0
            u = rng.random(int(lengths.sum()))
        else:
            key = imp.user if plan.source is Source.USER_KEYED else imp.item
            lengths, u = np.ones(n, np.int64), hash_uniform(key, zlib.crc32(plan.name.encode()) ^ world.seed)
        ids = (zipf_ranks(u, plan.vocab) * plan.multiplier + 7 * plan.vocab // 13) % plan.vocab
    if plan.kind is Kind.WEIGHTED_SPARSE and weights is None:
        weights = 1.0 - rng.random(ids.size)  # in (0, 1]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    omit, null = _missing(plan, rng, n)
    if plan.kind is Kind.SPARSE:
        weights = None
    return Column(plan.name, plan.kind, np.asarray(ids, np.int64), omit, null, offsets, weights)


def feature_columns(world: World, imp: Impressions, plans: tuple[DensePlan | SparsePlan, ...]) -> list[Column]:
    """Every planned feature for the day's impressions, in plan order."""
    return [
        dense_column(world, imp, plan) if isinstance(plan, DensePlan) else sparse_column(world, imp, plan)
        for plan in plans
    ]
