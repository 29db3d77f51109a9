"""The exception tree of streamplane.

Every error raised on purpose by streamplane derives from ``StreamplaneError``::

    StreamplaneError
    ├── ConfigError                 bad input: options, names, files
    ├── LocalFleetError             the local Kafka fleet (streamplane.local)
    │   └── PrerequisiteMissing     Java or Maven not on PATH
    ├── KafkaError                  a Kafka operation failed (code, retriable, fatal)
    ├── CodecError                  a commit-log or offsets-topic record could not be decoded
    ├── ControlPlaneError           the control plane answered with an error
    │   ├── ControlPlaneUnavailable the control plane cannot be reached
    │   ├── NotFound                unknown stream, cluster, group
    │   ├── Conflict                the resource exists / the epoch moved on
    │   └── Unauthorized            missing or wrong API token
    ├── ProduceError                a record could not be delivered
    └── RecordTooLarge              a record exceeds the stream's size bound

Subpackages raise these (or subclasses declared next to them); callers catch the root.
"""

from __future__ import annotations


class StreamplaneError(Exception):
    """Root of every error streamplane raises on purpose."""


class ConfigError(StreamplaneError):
    """Invalid user input: an option, a name, a file."""


class LocalFleetError(StreamplaneError):
    """The local Kafka fleet could not be started, stopped or inspected."""


class PrerequisiteMissing(LocalFleetError):
    """A tool the local fleet needs (Java, Maven) is not installed."""


class KafkaError(StreamplaneError):
    """A Kafka operation failed. Keeps the broker's error code and its flags."""

    def __init__(
        self, message: str, *, code: str | None = None, retriable: bool = False, fatal: bool = False
    ) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = retriable
        self.fatal = fatal


class CodecError(StreamplaneError):
    """Bytes that do not decode as the format they claim to be."""


class ControlPlaneError(StreamplaneError):
    """The control plane answered with an error."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ControlPlaneUnavailable(ControlPlaneError):
    """The control plane cannot be reached."""


class NotFound(ControlPlaneError):
    """An unknown stream, cluster or group."""


class Conflict(ControlPlaneError):
    """The resource already exists, or the state moved on."""


class Unauthorized(ControlPlaneError):
    """A missing (401) or wrong (403) API token."""


class ProduceError(StreamplaneError):
    """A record could not be delivered."""


class StreamDeleted(ProduceError, NotFound):
    """Records could not be delivered because their stream was deleted (its topics with
    it): raised by ``StreamProducer.flush`` and ``close``. A ``ProduceError`` (records
    not delivered), and a ``NotFound``, as ``send`` raises once the producer knows of
    the deletion."""


class RecordTooLarge(ProduceError):
    """A record is larger than the stream allows."""
