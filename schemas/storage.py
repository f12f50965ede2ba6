"""Where the warehouse's bytes are, for the readers that run without a JVM: a local folder or an S3 bucket.

    store = Store.from_settings(profile.settings(home), home=home)    # or Store() for <home>/warehouse
    store.warehouse                      # "s3://bucket/warehouse" (a profile's s3a:// location) or a local path
    store.filesystem()                   # pyarrow's S3FileSystem (or the local one), made once per process
    store.delta_options()                # deltalake's storage_options for the same bucket

One source of truth: a profile names its warehouse (``spark.sql.warehouse.dir``) and its S3 endpoint
and credentials (``spark.hadoop.fs.s3a.*``) for Spark; the reader, the preprocessing service and the
trainer take the same settings from it. ``s3a://`` (Hadoop's name) becomes ``s3://`` (pyarrow's and
deltalake's). Credentials never appear in a repr, a log line or an error.

Appends from several processes (the usage rows each training run writes): deltalake 1.x commits to
S3 with conditional writes, so two writers of the same version cannot both win; no locking provider
is configured (delta-rs 1.0 dropped the DynamoDB one; docs/object-storage.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from schemas.errors import ConfigError, TableError

S3A = "spark.hadoop.fs.s3a."
WAREHOUSE_DIR = "spark.sql.warehouse.dir"
_CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
                         "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")  # fmt: skip
_FILESYSTEMS: dict[tuple, Any] = {}  # (pid, store) -> filesystem: never shared across a fork


def is_s3(location: str) -> bool:
    return location.startswith(("s3://", "s3a://"))


def s3_uri(location: str) -> str:
    """``location`` with ``s3a://`` as ``s3://``; anything else unchanged."""
    return "s3://" + location[len("s3a://") :] if location.startswith("s3a://") else location


@dataclass(frozen=True)
class Store:
    """The warehouse's location and how to reach it; picklable (workers and actors get it), secrets kept out of
    ``repr``. ``endpoint`` None: AWS S3 itself; keys None: the AWS SDK's default credential chain."""

    warehouse: str  # a local folder, or s3://bucket/prefix
    endpoint: str | None = None
    region: str = "us-east-1"
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    path_style: bool = True

    @classmethod
    def local(cls, home: Path | str) -> Store:
        """The embedded default: ``<home>/warehouse``."""
        return cls(warehouse=str(Path(home) / "warehouse"))

    @classmethod
    def from_settings(cls, settings: Mapping[str, str], *, home: Path | str) -> Store:
        """The store a profile's Spark settings describe: its warehouse (default ``<home>/warehouse``) and, for an
        ``s3a://`` one, the S3A connector's endpoint, region and keys."""
        location = settings.get(WAREHOUSE_DIR) or str(Path(home) / "warehouse")
        if location.startswith("file:"):
            location = urlparse(location).path
        if not is_s3(location):
            if "://" in location:
                raise ConfigError(f"warehouse {location!r}: the reader reads local folders and s3:// or s3a:// "
                                  "buckets; set spark.sql.warehouse.dir in the profile to one of those")  # fmt: skip
            return cls(warehouse=location)
        access, secret = settings.get(S3A + "access.key"), settings.get(S3A + "secret.key")
        if (access is None) != (secret is None):
            raise ConfigError(f"warehouse {location}: the profile gives only one of {S3A}access.key and "
                              f"{S3A}secret.key; give both, or neither (the AWS SDK's default chain)")  # fmt: skip
        return cls(
            warehouse=s3_uri(location).rstrip("/"),
            endpoint=settings.get(S3A + "endpoint"),
            region=settings.get(S3A + "endpoint.region", "us-east-1"),
            access_key=access,
            secret_key=secret,
            path_style=settings.get(S3A + "path.style.access", "true").lower() == "true",
        )

    @property
    def on_s3(self) -> bool:
        return is_s3(self.warehouse)

    def where(self) -> str:
        """The store in words, for progress lines and errors: no secret."""
        return f"{self.warehouse} at {self.endpoint}" if self.endpoint else self.warehouse

    def check_credentials(self) -> None:
        """Refuse an S3 store with no credentials anywhere, before a request is made (the SDK would otherwise
        try the instance metadata service and fail late, or hang)."""
        if not self.on_s3 or self.access_key is not None:
            return
        home_credentials = Path(os.path.expanduser("~/.aws/credentials")).is_file()
        if not (home_credentials or any(os.environ.get(v) for v in _CREDENTIAL_VARIABLES)):
            raise ConfigError(
                f"no S3 credentials for {self.where()}: set {S3A}access.key and {S3A}secret.key in the profile, "
                "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment (or an AWS profile)"
            )

    def filesystem(self) -> Any:
        """pyarrow's filesystem for this store, made once per process (an S3 client must not cross a fork)."""
        from pyarrow import fs as pafs

        key = (os.getpid(), self)
        if key not in _FILESYSTEMS:
            if not self.on_s3:
                _FILESYSTEMS[key] = pafs.LocalFileSystem()
            else:
                self.check_credentials()
                endpoint = urlparse(self.endpoint) if self.endpoint else None
                _FILESYSTEMS[key] = pafs.S3FileSystem(
                    access_key=self.access_key, secret_key=self.secret_key, region=self.region,
                    endpoint_override=endpoint.netloc if endpoint else None,
                    scheme=endpoint.scheme if endpoint else "https", force_virtual_addressing=not self.path_style,
                    connect_timeout=5, request_timeout=30, allow_bucket_creation=False, allow_bucket_deletion=False,
                )  # fmt: skip
        return _FILESYSTEMS[key]

    def path(self, uri: str) -> str:
        """A file's path for :meth:`filesystem`: ``bucket/key`` on S3, the local path otherwise."""
        if is_s3(uri):
            return s3_uri(uri)[len("s3://") :]
        return urlparse(uri).path if uri.startswith("file:") else uri

    def delta_options(self) -> dict[str, str] | None:
        """deltalake's ``storage_options`` for this store (None for a local one)."""
        if not self.on_s3:
            return None
        self.check_credentials()
        options = {"AWS_REGION": self.region}
        if self.endpoint:
            options["AWS_ENDPOINT_URL"] = self.endpoint
            options["AWS_ALLOW_HTTP"] = str(self.endpoint.startswith("http://")).lower()
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(not self.path_style).lower()
        if self.access_key is not None and self.secret_key is not None:
            options |= {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
        return options

    def unreachable(self, uri: str, err: BaseException) -> TableError:
        """The one error for a store that did not answer: names the store and the fix, never a secret."""
        reason = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(err)).split())  # deltalake colours its error chain
        for secret in (self.access_key, self.secret_key):
            if secret:
                reason = reason.replace(secret, "***")
        return TableError(f"cannot read {uri} from {self.where()}: {reason}; check the profile's "
                          f"{S3A}endpoint and keys, and that the bucket exists")  # fmt: skip


def reader_store(home: Path, profile: str | None = None) -> Store:
    """The store of the readers' commands (read, dpp, train): ``--profile`` (else ``$FEATUREHOUSE_PROFILE``)'s
    warehouse and S3 settings, else ``<home>/warehouse``."""
    from schemas.profiles import chosen_profile

    chosen = chosen_profile(profile)
    return Store.from_settings(chosen.settings(home) if chosen else {}, home=home)


def add_profile_argument(parser: Any) -> None:
    """``--profile`` for the readers' commands: where the warehouse is (a folder or a bucket) and how to reach it."""
    parser.add_argument("--profile", default=None,
                        help="read the warehouse this profile names (spark.sql.warehouse.dir, an s3a:// bucket with "
                        "its spark.hadoop.fs.s3a.* endpoint and keys) (default: $FEATUREHOUSE_PROFILE, else "
                        "<home>/warehouse)")  # fmt: skip
