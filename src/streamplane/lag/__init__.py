"""Time lag: the __consumer_offsets reader and the lag model."""
