"""Mask secrets (connection passwords, tokens, keys) in text featurehouse prints.

A conf key is secret when it matches Spark's default ``spark.redaction.regex``,
``(?i)secret|password|token|access[.]?key``; a masked value reads as Spark's own
marker, ``*********(redacted)``. :func:`redact` masks, in free text:

* the value of a ``key=value`` pair whose key is secret, which also covers the
  ``;password=x`` (Derby) and ``?password=x&...`` (PostgreSQL) attributes of a JDBC URL;
* the password of a URL, ``scheme://user:password@host``;
* every occurrence of a value known to be secret (``secrets``), even a bare one.

Standard library only, like the rest of ``schemas``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

#: Spark's default ``spark.redaction.regex`` (org.apache.spark.internal.config, Spark 4.2).
SECRET_KEY = re.compile(r"secret|password|token|access[.]?key", re.IGNORECASE)
#: What Spark writes in place of a redacted value.
REDACTED = "*********(redacted)"

# A key=value pair whose key is secret; the value ends at whitespace, a quote, or a JDBC separator (; &).
_SECRET_PAIR = re.compile(
    rf"(?P<key>[\w.\-]*(?:{SECRET_KEY.pattern})[\w.\-]*)=(?P<value>[^\s'\";&]+)", re.IGNORECASE
)
# The password of a URL: scheme://user:password@host.
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][\w+.\-]*://[^\s:/@]*:)[^\s/@]+@")


def is_secret_key(key: str) -> bool:
    """Whether Spark would redact the value of a conf named ``key``.

    >>> is_secret_key("spark.hadoop.javax.jdo.option.ConnectionPassword")
    True
    >>> is_secret_key("spark.hadoop.fs.s3a.access.key"), is_secret_key("spark.sql.shuffle.partitions")
    (True, False)
    """
    return SECRET_KEY.search(key) is not None


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with secret values replaced by ``*********(redacted)``.

    ``secrets`` are literal values to mask wherever they occur (empty ones are ignored).

    >>> redact("--conf spark.hadoop.javax.jdo.option.ConnectionPassword=hunter2")
    '--conf spark.hadoop.javax.jdo.option.ConnectionPassword=*********(redacted)'
    >>> redact("jdbc:derby:;databaseName=/data/metastore_db;user=app;password=hunter2;create=true")
    'jdbc:derby:;databaseName=/data/metastore_db;user=app;password=*********(redacted);create=true'
    >>> redact("jdbc:postgresql://db:5432/hive?password=hunter2&ssl=true")
    'jdbc:postgresql://db:5432/hive?password=*********(redacted)&ssl=true'
    >>> redact("cannot reach postgresql://hive:hunter2@db:5432/hive")
    'cannot reach postgresql://hive:*********(redacted)@db:5432/hive'
    >>> redact("login failed with 'hunter2'", secrets=["hunter2"])
    "login failed with '*********(redacted)'"
    >>> redact("spark.sql.shuffle.partitions=8")
    'spark.sql.shuffle.partitions=8'
    """
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):  # longest first: one may contain another
        text = text.replace(secret, REDACTED)
    text = _URL_PASSWORD.sub(rf"\g<head>{REDACTED}@", text)
    return _SECRET_PAIR.sub(rf"\g<key>={REDACTED}", text)


def redact_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``conf`` with the values of secret keys masked (and passwords in other values' URLs).

    >>> redact_conf({"spark.hadoop.javax.jdo.option.ConnectionPassword": "hunter2", "spark.master": "local[*]"})
    {'spark.hadoop.javax.jdo.option.ConnectionPassword': '*********(redacted)', 'spark.master': 'local[*]'}
    """
    return {key: REDACTED if is_secret_key(key) else redact(value) for key, value in conf.items()}


def secret_values(conf: Mapping[str, str]) -> list[str]:
    """The non-empty values of the secret keys of ``conf``: what :func:`redact` should mask even bare.

    >>> secret_values({"spark.hadoop.javax.jdo.option.ConnectionPassword": "hunter2", "spark.master": "local[*]"})
    ['hunter2']
    """
    return [value for key, value in conf.items() if value and is_secret_key(key)]
