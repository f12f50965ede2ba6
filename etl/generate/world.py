"""The simulated world behind ``etl/generate/job.py``: latent users and items, requests, labels.

The world (user propensity and interests, item quality, topic, category, brand and
price, calibrated biases) is drawn once per run from the seed; each day then draws
its requests and label events from it with generators of its own, all vectorised.
Labels follow the registry: the first label type is the click-like event, every
other type a downstream (conversion-like) event that can only follow it.

The planted signal, which a model trained on the joined table should recover::

    click logit = b + 0.8 z_user + 0.8 z_item + 1.2 [item topic in the user's top topics]
                  - 0.25 (position - 1) + N(0, 0.5)                (b: click rate ~3%)
    conversion logit (after a click) = c + 0.6 z_item - 0.5 price_z   (c: ~10% of clicks)

35% of requests are served an item from one of the user's top topics (retrieval), the
rest a Zipf-popular item; positions 1..10 are geometric. Features that see this state
are drawn in ``etl/generate/features.py``.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, replace

import numpy as np

from etl.generate.jsonl import EPOCH_ORDINAL, MS_PER_DAY

ZIPF_EXPONENT = 1.1
N_TOPICS, TOP_TOPICS, N_CATEGORIES, N_BRANDS = 200, 5, 1000, 5000
TOPIC_SLOT_P = np.array([0.4, 0.25, 0.15, 0.12, 0.08])  # which of a user's top topics a targeted ad serves
TARGETED_SHARE = 0.35  # requests whose item was retrieved from one of the user's top topics
W_USER, W_ITEM, W_MATCH, W_POSITION, CLICK_NOISE = 0.8, 0.8, 1.2, -0.25, 0.5
W_CONV_ITEM, W_CONV_PRICE = 0.6, -0.5
CLICK_RATE, CONVERSIONS_PER_CLICK = 0.03, 0.10
_DIURNAL = 1.0 + 0.6 * np.cos(2 * np.pi * (np.arange(24) - 20) / 24)  # peak at 20:00 UTC
HOUR_P = _DIURNAL / _DIURNAL.sum()


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def zipf_cdf(n: int, exponent: float = ZIPF_EXPONENT) -> np.ndarray:
    """The CDF of a bounded Zipf law over ranks 0..n-1 (rank 0 the most frequent)."""
    weights = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return np.cumsum(weights) / weights.sum()


def zipf_ranks(u: np.ndarray, n: int) -> np.ndarray:
    """Ranks in [0, n) for uniforms ``u``, by the continuous bounded power law (no table needed)."""
    k = 1.0 - ZIPF_EXPONENT
    x = (1.0 + u * ((n + 1.0) ** k - 1.0)) ** (1.0 / k)
    return np.clip(x.astype(np.int64) - 1, 0, n - 1)


@dataclass(frozen=True, eq=False)
class World:
    """The run's latent state, indexed by user id and item id."""

    seed: int
    user_cdf: np.ndarray
    user_ids: np.ndarray  # popularity rank -> user id
    item_cdf: np.ndarray
    item_ids: np.ndarray
    z_user: np.ndarray
    user_topics: np.ndarray  # (users, TOP_TOPICS), most interesting first
    user_topic_weight: np.ndarray  # (users, TOP_TOPICS), in (0, 1], first is 1
    z_item: np.ndarray
    item_topic: np.ndarray
    item_topic2: np.ndarray  # a secondary topic, or -1
    item_category: np.ndarray
    item_brand: np.ndarray
    item_price: np.ndarray
    conv_driver: np.ndarray  # W_CONV_ITEM z_item + W_CONV_PRICE price_z
    items_by_topic: np.ndarray
    topic_start: np.ndarray
    topic_count: np.ndarray
    click_bias: float = 0.0
    conv_bias: float = 0.0


@dataclass(frozen=True, eq=False)
class Impressions:
    """One day's distinct impressions, sorted by time."""

    day: dt.date
    time_ms: np.ndarray  # ms since the epoch, UTC
    user: np.ndarray
    item: np.ndarray
    position: np.ndarray
    match: np.ndarray
    click_logit: np.ndarray
    conv_logit: np.ndarray

    @property
    def n(self) -> int:
        return self.user.size


def build_world(*, users: int, items: int, seed: int) -> World:
    """Draw the latent state once per run and calibrate the click and conversion biases."""
    rng = np.random.default_rng([seed, 1])
    topic_cdf = zipf_cdf(N_TOPICS, 0.7)  # flatter than ids: many topics matter
    base = np.minimum(np.searchsorted(topic_cdf, rng.random(users)), N_TOPICS - 1)
    steps = rng.integers(1, 30, size=(users, TOP_TOPICS))
    steps[:, 0] = 0
    user_topics = (base[:, None] + np.cumsum(steps, axis=1)) % N_TOPICS
    weight = np.sort(rng.dirichlet(np.ones(TOP_TOPICS), size=users), axis=1)[:, ::-1]
    item_topic = np.minimum(np.searchsorted(topic_cdf, rng.random(items)), N_TOPICS - 1)
    other_topic = (item_topic + rng.integers(1, N_TOPICS, items)) % N_TOPICS
    item_topic2 = np.where(rng.random(items) < 0.4, other_topic, -1)
    item_ids = rng.permutation(items)
    rank_of_item = np.empty(items, np.int64)
    rank_of_item[item_ids] = np.arange(items)
    log_price = rng.normal(math.log(30.0), 1.0, items)
    z_item = rng.standard_normal(items)
    price_z = (log_price - log_price.mean()) / (log_price.std() or 1.0)
    by_topic = np.lexsort((rank_of_item, item_topic))
    counts = np.bincount(item_topic, minlength=N_TOPICS)
    world = World(
        seed=seed,
        user_cdf=zipf_cdf(users),
        user_ids=rng.permutation(users),
        item_cdf=zipf_cdf(items),
        item_ids=item_ids,
        z_user=rng.standard_normal(users),
        user_topics=user_topics,
        user_topic_weight=weight / weight[:, :1],
        z_item=z_item,
        item_topic=item_topic,
        item_topic2=item_topic2,
        item_category=zipf_ranks(rng.random(items), N_CATEGORIES),
        item_brand=zipf_ranks(rng.random(items), N_BRANDS),
        item_price=np.exp(log_price),
        conv_driver=W_CONV_ITEM * z_item + W_CONV_PRICE * price_z,
        items_by_topic=by_topic,
        topic_start=np.concatenate([[0], np.cumsum(counts)[:-1]]),
        topic_count=counts,
    )
    sample = _draw_core(world, np.random.default_rng([seed, 2]), 100_000)
    click_bias = _solve_bias(sample["score"], np.ones_like(sample["score"]), CLICK_RATE)
    p_click = sigmoid(click_bias + sample["score"])
    conv_bias = _solve_bias(world.conv_driver[sample["item"]], p_click, CONVERSIONS_PER_CLICK)
    return replace(world, click_bias=click_bias, conv_bias=conv_bias)


def _solve_bias(score: np.ndarray, weight: np.ndarray, target: float) -> float:
    """The b with weighted mean of sigmoid(b + score) equal to ``target`` (bisection)."""
    low, high = -30.0, 30.0
    for _ in range(40):
        mid = (low + high) / 2
        if np.average(sigmoid(mid + score), weights=weight) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _draw_core(world: World, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Users, items, positions and the click score (logit without bias) of ``n`` requests."""
    user = world.user_ids[np.minimum(np.searchsorted(world.user_cdf, rng.random(n)), world.user_ids.size - 1)]
    item = world.item_ids[np.minimum(np.searchsorted(world.item_cdf, rng.random(n)), world.item_ids.size - 1)]
    topic = world.user_topics[user, rng.choice(TOP_TOPICS, n, p=TOPIC_SLOT_P)]
    count = world.topic_count[topic]
    targeted = (rng.random(n) < TARGETED_SHARE) & (count > 0)
    pick = world.topic_start[topic] + (count * rng.random(n) ** 3).astype(np.int64)
    item = np.where(targeted, world.items_by_topic[np.minimum(pick, world.items_by_topic.size - 1)], item)
    position = 1 + np.minimum(rng.geometric(0.35, n) - 1, 9)
    match = (world.user_topics[user] == world.item_topic[item][:, None]).any(axis=1)
    score = (
        W_USER * world.z_user[user] + W_ITEM * world.z_item[item] + W_MATCH * match
        + W_POSITION * (position - 1) + rng.normal(0.0, CLICK_NOISE, n)
    )  # fmt: skip
    return {"user": user, "item": item, "position": position, "match": match, "score": score}


def draw_impressions(world: World, day: dt.date, n: int) -> Impressions:
    """A day's ``n`` requests: diurnal times (sorted), Zipf users and items, the true logits."""
    rng = np.random.default_rng([world.seed, 3, day.toordinal()])
    hour = rng.choice(24, n, p=HOUR_P)
    of_day = np.sort(hour * 3_600_000 + rng.integers(0, 3_600_000, n))
    core = _draw_core(world, rng, n)
    start_ms = (day.toordinal() - EPOCH_ORDINAL) * MS_PER_DAY
    return Impressions(
        day=day,
        time_ms=start_ms + of_day,
        user=core["user"],
        item=core["item"],
        position=core["position"],
        match=core["match"],
        click_logit=world.click_bias + core["score"],
        conv_logit=world.conv_bias + world.conv_driver[core["item"]],
    )


@dataclass(frozen=True, eq=False)
class Labels:
    """Label events: the impression they refer to (its ds as yyyymmdd and its number that day),
    the label type (index into ``registry.labels``), and times in ms since the epoch.
    ``impression_ms`` is -1 for orphans (labels whose impression was never logged)."""

    yyyymmdd: np.ndarray
    counter: np.ndarray
    label: np.ndarray
    impression_ms: np.ndarray
    time_ms: np.ndarray

    @staticmethod
    def concat(parts: list[Labels]) -> Labels:
        fields = ("yyyymmdd", "counter", "label", "impression_ms", "time_ms")
        return Labels(*(np.concatenate([getattr(p, f) for p in parts]).astype(np.int64) for f in fields))


def draw_labels(world: World, imp: Impressions, windows_ms: list[int]) -> Labels:
    """The day's label events. The first label type is the click: Bernoulli on the true click
    probability, delays log-normal (median 30 s, or window/20 if shorter), 2% after the window.
    Each further type (conversion) follows a click with the conversion probability, delays
    log-normal from the click (median 8 h, or window/6 if shorter), 5% after its window."""
    rng = np.random.default_rng([world.seed, 4, imp.day.toordinal()])
    clicked = np.flatnonzero(rng.random(imp.n) < sigmoid(imp.click_logit))
    shown = imp.time_ms[clicked]
    click_ms = _event_times(rng, shown, shown, windows_ms[0], min(30_000, windows_ms[0] // 20), 1.2, 0.02)
    parts = [(clicked, 0, click_ms)]
    p_conv = sigmoid(imp.conv_logit[clicked])
    for k, window in enumerate(windows_ms[1:], start=1):
        hit = rng.random(clicked.size) < p_conv
        times = _event_times(rng, shown[hit], click_ms[hit], window, min(8 * 3_600_000, window // 6), 1.0, 0.05)
        parts.append((clicked[hit], k, times))
    yyyymmdd = int(imp.day.strftime("%Y%m%d"))
    return Labels(
        yyyymmdd=np.concatenate([np.full(idx.size, yyyymmdd) for idx, _, _ in parts]),
        counter=np.concatenate([idx for idx, _, _ in parts]),
        label=np.concatenate([np.full(idx.size, k) for idx, k, _ in parts]),
        impression_ms=np.concatenate([imp.time_ms[idx] for idx, _, _ in parts]),
        time_ms=np.concatenate([t for _, _, t in parts]),
    )


def _event_times(
    rng: np.random.Generator, shown: np.ndarray, after: np.ndarray, window: int, median: int, sigma: float, late: float
) -> np.ndarray:
    """Times of events that follow ``after``: inside ``window`` of ``shown``, or beyond it for a ``late`` share."""
    n = shown.size
    delay = (max(median, 1) * np.exp(sigma * rng.standard_normal(n))).astype(np.int64)
    inside = np.maximum(np.minimum(after + delay, shown + window - 1), after)
    beyond = np.maximum(shown + window + 1000 + rng.exponential(window / 4, n).astype(np.int64), after)
    return np.where(rng.random(n) < late, beyond, inside)
