"""The public API is what streamplane/__init__.py exports; this test keeps it that way."""

from __future__ import annotations

import streamplane

EXPECTED = {
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
    "StreamMessage",
    "StreamDeleted",
    "StreamProducer",
    "StreamplaneError",
    "Unauthorized",
    "__version__",
}


def test_public_names_are_exactly_the_exported_ones() -> None:
    assert set(streamplane.__all__) == EXPECTED
    for name in streamplane.__all__:
        assert hasattr(streamplane, name), name


def test_every_error_derives_from_the_root() -> None:
    for name in streamplane.__all__:
        obj = getattr(streamplane, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, streamplane.StreamplaneError), name


def test_the_package_shows_only_its_api_and_its_modules() -> None:
    """``dir(streamplane)`` lists the API, the subpackages and dunders: no stray names
    (``annotations``, the __future__ feature, was one)."""
    import types

    stray = [
        name
        for name in dir(streamplane)
        if not name.startswith("__")
        and name not in EXPECTED
        and not isinstance(getattr(streamplane, name), types.ModuleType)
    ]
    assert stray == []
