"""Event and feature definitions, and the builders of Spark and Arrow schemas.

Imports nothing else of featurehouse; everything else may import it.
"""

from schemas.errors import FeaturehouseError, RegistryError
from schemas.registry import DatasetRegistry, Feature, Kind, LabelSpec, load_dataset, load_registry

__all__ = [
    "DatasetRegistry",
    "Feature",
    "FeaturehouseError",
    "Kind",
    "LabelSpec",
    "RegistryError",
    "load_dataset",
    "load_registry",
]
