"""Thin adapters over the Kafka clients (confluent-kafka)."""
