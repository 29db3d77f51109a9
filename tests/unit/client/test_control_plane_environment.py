"""ControlPlaneClient.from_env(): the URL and token from the environment
(``STREAMPLANE_URL``, ``STREAMPLANE_API_TOKEN``, as the CLI reads them; the constructor
reads none), and the 401 that a client without a token gets. A local HTTP server stands
for the control plane and records the Authorization header of each request."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.exceptions import ConfigError, Unauthorized

URL_ENV = "STREAMPLANE_URL"  # the CLI's variables (--url, --token)
TOKEN_ENV = "STREAMPLANE_API_TOKEN"

MISSING = "missing API token: send 'Authorization: Bearer <token>'"


class Recorder(BaseHTTPRequestHandler):
    """Answers GET /healthz; a POST without a token gets the control plane's 401."""

    seen: list[str | None]

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        self._answer(200, {"status": "ok"})

    def do_POST(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Authorization"):
            self._answer(200, {"name": "eu-1"})
        else:
            self._answer(401, {"detail": MISSING})

    def _answer(self, status: int, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[str | None]]]:
    """(its URL, the Authorization header of each request it got)"""
    seen: list[str | None] = []
    handler = type("Handler", (Recorder,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    monkeypatch.delenv(TOKEN_ENV, raising=False)


def test_from_env_takes_url_and_token_from_the_environment(
    server: tuple[str, list[str | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = server
    monkeypatch.setenv(URL_ENV, url)
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    with ControlPlaneClient.from_env() as cp:
        assert cp.urls == (url,)
        assert cp.health() == {"status": "ok"}
        cp.register_cluster("eu-1", "h:1")  # a change: needs the token
    assert seen == ["Bearer from-env", "Bearer from-env"]


def test_the_constructor_reads_no_environment(
    server: tuple[str, list[str | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No hidden environment reads (a Spark job given no token took the variable)."""
    url, seen = server
    monkeypatch.setenv(URL_ENV, "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    with ControlPlaneClient(url, token="given") as cp:
        cp.health()
    with ControlPlaneClient(url) as cp, pytest.raises(Unauthorized):
        cp.register_cluster("eu-1", "h:1")
    assert seen == ["Bearer given", None]


def test_from_env_without_a_url_is_a_config_error_naming_the_variable() -> None:
    with pytest.raises(ConfigError) as err:
        ControlPlaneClient.from_env()
    message = str(err.value)
    assert message.startswith(f"{URL_ENV} is not set")
    assert "ControlPlaneClient(url, token=...)" in message


def test_a_bad_url_in_the_environment_is_named_as_coming_from_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(URL_ENV, "cp-1:8470")
    with pytest.raises(ConfigError, match=f"^{URL_ENV}: invalid control-plane URL 'cp-1:8470'"):
        ControlPlaneClient.from_env()


def test_the_401_of_a_client_without_a_token_names_both_ways_to_give_it_one(
    server: tuple[str, list[str | None]],
) -> None:
    url, _ = server
    with ControlPlaneClient(url) as cp, pytest.raises(Unauthorized) as err:
        cp.register_cluster("eu-1", "h:1")
    message = str(err.value)
    assert message.startswith(MISSING)
    assert "ControlPlaneClient(url, token=...)" in message
    assert f"set {TOKEN_ENV} for ControlPlaneClient.from_env()" in message
    assert "CLI" not in message
