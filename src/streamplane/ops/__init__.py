"""Fleet operations: partition mapper, executor, autothrottle, metrics fetcher, tags."""
