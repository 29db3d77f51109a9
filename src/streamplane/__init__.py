"""streamplane: a streaming platform over Apache Kafka.

The public API is what ``__all__`` lists; everything else may move.
"""

from __future__ import annotations

from streamplane.exceptions import (
    CodecError,
    ConfigError,
    Conflict,
    ControlPlaneError,
    ControlPlaneUnavailable,
    KafkaError,
    LocalFleetError,
    NotFound,
    PrerequisiteMissing,
    ProduceError,
    RecordTooLarge,
    StreamplaneError,
    Unauthorized,
)

__version__ = "0.1.0"

__all__ = [
    "CodecError",
    "ConfigError",
    "Conflict",
    "ControlPlaneError",
    "ControlPlaneUnavailable",
    "KafkaError",
    "LocalFleetError",
    "NotFound",
    "PrerequisiteMissing",
    "ProduceError",
    "RecordTooLarge",
    "StreamplaneError",
    "Unauthorized",
    "__version__",
]
