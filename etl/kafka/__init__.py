"""Kafka: a local broker for runs and tests, topic administration, and the producer of landing-zone logs."""
