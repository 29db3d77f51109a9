"""Errors raised by the partition mapper.

Every one is bad input (a cluster that cannot hold the requested placement is an
input problem too), so the tree hangs under ``ConfigError``::

    ConfigError
    └── MapperError                 any mapper input the planners refuse
        ├── PlacementError          no broker passes the constraints for some replica
        │   └── RackConstraintError the rack policy cannot be met by the eligible brokers
        └── ReassignmentJsonError   a reassignment JSON document failed validation
"""

from __future__ import annotations

from collections.abc import Iterable

from streamplane.exceptions import ConfigError


class MapperError(ConfigError):
    """The mapper refused its input."""


class PlacementError(MapperError):
    """At least one replica slot has no broker that passes every constraint."""


class RackConstraintError(PlacementError):
    """The eligible brokers do not span enough racks for the rack policy."""


class ReassignmentJsonError(MapperError):
    """A reassignment JSON document is malformed; ``problems`` lists every finding."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        shown = "; ".join(self.problems[:10])
        more = len(self.problems) - 10
        suffix = f" (and {more} more)" if more > 0 else ""
        super().__init__(f"invalid reassignment JSON: {shown}{suffix}")
