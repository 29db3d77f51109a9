"""ControlPlaneClient's errors for input it can refuse itself and for a URL where no
control plane answers (a plain HTTP server stands in for "something else")."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import HTTPServer, SimpleHTTPRequestHandler

import pytest

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.exceptions import ConfigError, ControlPlaneError, NotFound


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def other_server() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_a_name_with_a_slash_is_refused_before_any_request() -> None:
    with ControlPlaneClient("http://127.0.0.1:9") as cp:  # nothing listens: not asked
        with pytest.raises(ConfigError, match="names cannot contain '/'"):
            cp.describe_stream("a/b")
        with pytest.raises(ConfigError, match="names cannot contain '/'"):
            cp.get_cluster("x/y")


def test_a_server_that_is_not_a_control_plane_is_named_as_such(other_server: str) -> None:
    with ControlPlaneClient(other_server) as cp, pytest.raises(ControlPlaneError) as err:
        cp.routing("orders")
    message = str(err.value)
    assert message.startswith(f"no streamplane control plane answers at {other_server}: ")
    assert "GET /v1/streams/orders/routing got HTTP 404" in message
    assert not isinstance(err.value, NotFound)  # not "unknown stream"
