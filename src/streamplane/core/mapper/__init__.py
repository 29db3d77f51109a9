"""The partition mapper: pure placement planning for Kafka partitions.

No network, no Kafka, no threads: planners take a ``PartitionMap`` (where replicas
are) and a ``BrokerMap`` (what brokers exist, their racks, free storage and state)
and return a ``Plan`` — the proposed map, warnings, and a per-broker diff — that the
CLI writes as Kafka's reassignment JSON.

- ``rebuild``: replace retiring/dead brokers with minimal movement, force a full
  re-placement, or change the replication factor (count or storage strategy).
- ``rebalance``: offload brokers short of free storage, with a tolerance sweep.
- ``scale``: spread replicas onto newly added brokers.
- ``optimize_leadership`` / ``balance_leaders``: balance preferred leaders.
- ``to_reassignment_json`` / ``parse_reassignment_json``: Kafka's JSON format.
"""

from __future__ import annotations

from streamplane.core.mapper.constraints import RackPolicy
from streamplane.core.mapper.exceptions import (
    MapperError,
    PlacementError,
    RackConstraintError,
    ReassignmentJsonError,
)
from streamplane.core.mapper.leadership import balance_leaders, optimize_leadership
from streamplane.core.mapper.models import (
    Broker,
    BrokerMap,
    BrokerState,
    Partition,
    PartitionMap,
    PlacementStrategy,
    StorageStats,
    TopicPartition,
    storage_stats,
)
from streamplane.core.mapper.plan import BrokerDiff, Plan, PlanDiff, ReplicaMove, SweepResult
from streamplane.core.mapper.reassignment_json import (
    ParsedReassignment,
    parse_reassignment_json,
    to_reassignment_json,
)
from streamplane.core.mapper.rebalance import (
    DEFAULT_TOLERANCES,
    RebalanceParams,
    RelocationParams,
    rebalance,
)
from streamplane.core.mapper.rebuild import RebuildParams, rebuild
from streamplane.core.mapper.scale import ScaleParams, scale

__all__ = [
    "DEFAULT_TOLERANCES",
    "Broker",
    "BrokerDiff",
    "BrokerMap",
    "BrokerState",
    "MapperError",
    "ParsedReassignment",
    "Partition",
    "PartitionMap",
    "PlacementError",
    "PlacementStrategy",
    "Plan",
    "PlanDiff",
    "RackConstraintError",
    "RackPolicy",
    "ReassignmentJsonError",
    "RebalanceParams",
    "RebuildParams",
    "RelocationParams",
    "ReplicaMove",
    "ScaleParams",
    "StorageStats",
    "SweepResult",
    "TopicPartition",
    "balance_leaders",
    "optimize_leadership",
    "parse_reassignment_json",
    "rebalance",
    "rebuild",
    "scale",
    "storage_stats",
    "to_reassignment_json",
]
