"""The local Kafka fleet: real Apache Kafka brokers in KRaft mode on loopback."""
