"""A bad stream name is refused by the client, before any request, with the naming rule
(the control plane's own words): it was the server's 400 as a ControlPlaneError for
``Orders!``, and ``invalid name ''`` without the rule for an empty name."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from streamplane.client.consumer import StreamConsumer
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
from streamplane.core.routing import new_routing_table, validate_stream_name
from streamplane.exceptions import ConfigError
from tests.unit.client.harness import Unreachable

RULE = "use 1-63 lower-case letters, digits and '-', starting with a letter or digit"
BAD_NAMES = ["Orders!", "", "-orders", "orders/x", ".", "a" * 64, "orders\n"]


def _server_message(name: str) -> str:
    """What the control plane answers (its 400's detail): the core's check."""
    with pytest.raises(ConfigError) as err:
        validate_stream_name(name)
    return str(err.value)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_the_producer_refuses_a_bad_stream_name_when_made(name: str) -> None:
    control_plane = Unreachable()
    with pytest.raises(ConfigError) as err:
        StreamProducer(name, control_plane)  # type: ignore[arg-type]
    assert str(err.value) == _server_message(name)
    assert f"invalid stream name {name!r}: {RULE}" == str(err.value)
    assert control_plane.calls == []


@pytest.mark.parametrize("name", BAD_NAMES)
def test_the_consumer_refuses_a_bad_stream_name_when_made(name: str) -> None:
    control_plane = Unreachable()
    with pytest.raises(ConfigError) as err:
        StreamConsumer(name, "g", control_plane)  # type: ignore[arg-type]
    assert f"invalid stream name {name!r}: {RULE}" == str(err.value)
    assert control_plane.calls == []


@pytest.mark.parametrize("name", BAD_NAMES)
def test_create_stream_refuses_a_bad_name_before_any_request(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = ControlPlaneClient("http://127.0.0.1:9", token="t", timeout=0.5)
    requests: list[tuple[Any, ...]] = []
    monkeypatch.setattr(client, "_json", lambda *args, **kwargs: requests.append(args))
    with client, pytest.raises(ConfigError) as err:
        client.create_stream(name, "local-a")
    assert str(err.value) == f"invalid stream name {name!r}: {RULE}"
    assert requests == []


def test_a_non_string_name_gets_the_rule_too() -> None:
    with pytest.raises(ConfigError, match="invalid stream name None: use 1-63"):
        StreamProducer(None, Unreachable())  # type: ignore[arg-type]


def test_good_names_pass() -> None:
    for name in ("orders", "0rders", "logs-intake", "a" * 63):
        assert StreamProducer(name, Unreachable()).stream == name  # type: ignore[arg-type]


class _ControlPlane:
    """Routing and settings of stream ``orders``, whose records are bound to 1000 bytes."""

    def __init__(self) -> None:
        self.table = new_routing_table("orders", ["realtime"], "local-a", 1)
        self.stop = threading.Event()

    def routing(self, stream: str) -> Any:
        return self.table

    def watch_routing(self, stream: str, after_epoch: int, timeout: float) -> Any:
        self.stop.wait(0.05)
        return self.table

    def describe_stream(self, name: str) -> dict[str, Any]:
        return {"name": name, "max_record_bytes": 1000}


def test_a_bound_above_the_streams_reads_well() -> None:
    """It read "above stream 'orders''s bound of 1000 bytes" (a doubled quote)."""
    control_plane = _ControlPlane()
    producer = StreamProducer("orders", control_plane, max_record_bytes=2000)  # type: ignore[arg-type]
    try:
        with pytest.raises(ConfigError) as err:
            producer.open()
    finally:
        control_plane.stop.set()
    assert str(err.value) == (
        "max_record_bytes=2000 is above the bound of stream 'orders' (1000 bytes)"
    )
