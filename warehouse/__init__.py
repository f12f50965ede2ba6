"""Spark session, feature tables, SQL; the warehouse side of featurehouse."""
