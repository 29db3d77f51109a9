"""The control plane service: registry, routing, Assigner, failover, health, lag."""
