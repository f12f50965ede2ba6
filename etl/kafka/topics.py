"""The one topic naming rule: ``<prefix>.<dataset>.<kind>``, kind ``impressions`` or ``labels``.

``featurehouse produce`` writes these topics and ``featurehouse stream --source kafka`` reads them,
so both take the prefix through :func:`check_topic_prefix` and the names from :func:`topic_name`.
The prefix may hold what a Kafka topic name may hold (letters of either case, digits, ``.``,
``_``, ``-``), 1-200 of them: the name reaches Kafka's client options, never a path or a query.
"""

from __future__ import annotations

import re

from schemas.errors import ConfigError
from schemas.names import validate_name

DEFAULT_TOPIC_PREFIX = "featurehouse"
TOPIC_PREFIX = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def check_topic_prefix(prefix: object) -> str:
    """``prefix`` if it is a legal start of a Kafka topic name, else a :class:`ConfigError` naming the flag."""
    if not isinstance(prefix, str) or not TOPIC_PREFIX.fullmatch(prefix):
        raise ConfigError(f"--topic-prefix {prefix!r} is not a Kafka topic name part; use 1-200 "
                          "letters, digits, '.', '_' or '-', e.g. --topic-prefix featurehouse")  # fmt: skip
    return prefix


def topic_name(prefix: str, dataset: str, kind: str) -> str:
    """The topic of ``dataset``'s ``kind`` records: ``topic_name("featurehouse", "ads", "labels")`` is
    ``featurehouse.ads.labels``."""
    return f"{check_topic_prefix(prefix)}.{validate_name('dataset', dataset)}.{kind}"
