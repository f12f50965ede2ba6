"""Criteo's published click logs: the import job and a synthetic sample with a planted signal."""
