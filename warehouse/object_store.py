"""Tables on S3 (``s3a://`` locations): the Spark settings of Hadoop's S3A connector, and its jars.

The connector (hadoop-aws with the AWS SDK v2 bundle, about 650 MB) is resolved by ``make s3-jars``
into ``.jvm/s3``, apart from ``.jvm/jars``: only a session that passes these settings loads it. A
single driver's Delta writes to S3 are safe with Delta's default S3 log store; writers in several
clusters need the DynamoDB log store (docs/object-storage.md).

>>> confs = s3a_confs("http://127.0.0.1:9000", access_key="k", secret_key="s")  # doctest: +SKIP
>>> with spark_session(home, conf={**confs, "spark.sql.warehouse.dir": "s3a://bucket/warehouse"}):  # doctest: +SKIP
...     ...
"""

from __future__ import annotations

import os
from pathlib import Path

from schemas.errors import ConfigError
from schemas.paths import REPO_ROOT
from schemas.storage import Store
from warehouse.confs import delta_jars

#: Where ``make s3-jars`` puts hadoop-aws and the AWS SDK bundle (jvm/s3/pom.xml).
DEFAULT_S3_JARS_DIR = REPO_ROOT / ".jvm" / "s3"


def s3_jars(jars_dir: Path | None = None) -> list[str]:
    """The S3A connector's jars (``$FEATUREHOUSE_S3_JARS`` or ``.jvm/s3``); a ConfigError if there are none."""
    directory = Path(os.environ.get("FEATUREHOUSE_S3_JARS") or jars_dir or DEFAULT_S3_JARS_DIR)
    jars = sorted(str(p) for p in directory.glob("*.jar"))
    if not any(Path(j).name.startswith("hadoop-aws-") for j in jars):
        raise ConfigError(
            f"no S3A connector (hadoop-aws-*.jar) in {directory}; run `make s3-jars` "
            "(resolves org.apache.hadoop:hadoop-aws from Maven Central once, see jvm/s3/pom.xml)"
        )
    return jars


def s3a_confs(
    endpoint: str | None = None,
    *,
    access_key: str | None = None,
    secret_key: str | None = None,
    region: str = "us-east-1",
    path_style: bool | None = None,
    jars: bool = True,
) -> dict[str, str]:
    """Spark confs that reach ``s3a://`` paths: the connector's settings, plus ``spark.jars`` (Delta's and S3A's).

    ``endpoint``: an S3-compatible server's URL (``http://`` turns TLS off), or None for AWS S3 itself.
    ``path_style`` defaults to True for an endpoint of your own (bucket in the path, not the host name).
    Without keys the AWS SDK's default credential chain applies (environment, profile, instance role).
    ``jars=False`` leaves ``spark.jars`` out, for spark-submit, which takes the same jars as ``--jars``.
    """
    confs = {"spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
             "spark.hadoop.fs.s3a.endpoint.region": region}  # fmt: skip
    if endpoint is not None:
        confs["spark.hadoop.fs.s3a.endpoint"] = endpoint
        confs["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(not endpoint.startswith("http://")).lower()
        confs["spark.hadoop.fs.s3a.path.style.access"] = str(True if path_style is None else path_style).lower()
    elif path_style is not None:
        confs["spark.hadoop.fs.s3a.path.style.access"] = str(path_style).lower()
    if (access_key is None) != (secret_key is None):
        raise ConfigError("give both access_key and secret_key, or neither (the AWS SDK's default credential chain)")
    if access_key is not None and secret_key is not None:
        confs["spark.hadoop.fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        confs["spark.hadoop.fs.s3a.access.key"] = access_key
        confs["spark.hadoop.fs.s3a.secret.key"] = secret_key
    if jars:
        confs["spark.jars"] = ",".join(delta_jars() + s3_jars())
    return confs


def delta_rs_storage_options(
    endpoint: str | None = None,
    *,
    access_key: str | None = None,
    secret_key: str | None = None,
    region: str = "us-east-1",
) -> dict[str, str]:
    """The same store for deltalake (no JVM): ``DeltaTable(uri, storage_options=...)`` (``schemas.storage.Store``'s).

    Use ``s3://`` URIs there (``s3a://`` is Hadoop's name for the same objects).
    """
    store = Store(warehouse="s3://", endpoint=endpoint, region=region, access_key=access_key, secret_key=secret_key)
    return store.delta_options() or {}
