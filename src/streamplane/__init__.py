"""streamplane: a streaming platform over Apache Kafka.

The public API is what ``__all__`` lists; everything else may move.
"""

__version__ = "0.1.0"  # before the imports below: submodules read it

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
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
    StreamDeleted,
    StreamplaneError,
    Unauthorized,
)

__all__ = [
    "CodecError",
    "ConfigError",
    "Conflict",
    "ControlPlaneClient",
    "ControlPlaneError",
    "ControlPlaneUnavailable",
    "KafkaError",
    "LocalFleetError",
    "NotFound",
    "PrerequisiteMissing",
    "ProduceError",
    "RecordTooLarge",
    "StreamConsumer",
    "StreamDeleted",
    "StreamMessage",
    "StreamProducer",
    "StreamplaneError",
    "Unauthorized",
    "__version__",
]
