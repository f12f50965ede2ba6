"""The one exception hierarchy of featurehouse.

It lives in ``schemas`` because every other package may import ``schemas`` and
``schemas`` imports nothing of ours. A message says what was found, what is
allowed, and how to fix it; the CLI prints it as one line and exits non-zero.
"""

from __future__ import annotations


class FeaturehouseError(Exception):
    """Root of every error featurehouse raises on purpose."""


class RegistryError(FeaturehouseError):
    """A feature registry file is missing, malformed or inconsistent."""


class InvalidNameError(FeaturehouseError):
    """A dataset, feature or table name does not match the allowed pattern."""


class ConfigError(FeaturehouseError):
    """A command-line flag or config value is invalid."""


class LandingError(FeaturehouseError):
    """The landing zone lacks a partition a job needs, or it is not closed yet."""


class TableError(FeaturehouseError):
    """A warehouse table is missing or does not match what the registry says."""
