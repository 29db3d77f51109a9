"""The client library: StreamProducer, StreamConsumer, ControlPlaneClient."""
