"""Request bodies are bounded before they are read: a body over the limit is a 413 (at
once from its Content-Length, or as soon as a chunked body passes it), JSON nested too
deep a 422, both in the API's error format and ahead of the token check. Four parallel
100 MB POSTs without a token each got their 401 only after the server read them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from pydantic import ValidationError
from starlette.types import Message

from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.body_limit import (
    DEFAULT_MAX_BODY_BYTES,
    BodyGuard,
    BodyLimitMiddleware,
    BodyRejected,
)
from streamplane.controlplane.service import ControlPlaneService
from tests.unit.controlplane.conftest import AUTH, create_stream

MiB = 1024 * 1024


def test_a_declared_length_over_the_limit_is_413_before_the_token_check(
    http: TestClient,
) -> None:
    resp = http.post(
        "/v1/streams",
        content=b"x" * (DEFAULT_MAX_BODY_BYTES + 1),
        headers={"content-type": "application/json"},  # no token
    )
    assert resp.status_code == 413
    assert resp.json() == {
        "detail": "the request body is larger than 8 MiB, the control plane's limit"
    }


def test_a_chunked_body_over_the_limit_is_413(http: TestClient) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: sent chunked
        for _ in range(9):
            yield b" " * MiB

    resp = http.post("/v1/streams", content=chunks())  # no token
    assert resp.status_code == 413
    assert resp.json() == {
        "detail": "the request body is larger than 8 MiB, the control plane's limit"
    }


def test_a_streamed_body_is_read_no_further_than_the_limit() -> None:
    """The app reads through the middleware; the chunk that passes the limit is the
    last one asked for, and the app is told the client left."""
    received = 0
    app_got: list[str] = []

    async def receive() -> dict[str, object]:
        nonlocal received
        received += 1
        return {"type": "http.request", "body": b" " * MiB, "more_body": received < 100}

    async def app(scope: object, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            app_got.append(message["type"])
            if message["type"] == "http.disconnect":
                await send({"type": "http.response.start", "status": 400, "headers": []})
                await send({"type": "http.response.body", "body": b"client left"})
                return

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/streams", "headers": []}
    asyncio.run(BodyLimitMiddleware(app, max_body_bytes=4 * MiB)(scope, receive, send))
    assert received == 5
    assert app_got == ["http.request"] * 4 + ["http.disconnect"]
    assert [m.get("status") for m in sent] == [413, None]  # the app's answer is dropped
    assert json.loads(sent[1]["body"])["detail"].startswith("the request body is larger than 4 MiB")


def test_the_middleware_does_not_read_a_body_declared_too_large() -> None:
    called = False

    async def app(scope: object, receive: object, send: object) -> None:
        nonlocal called
        called = True

    async def receive() -> dict[str, object]:
        raise AssertionError("the body was read")

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/streams",
        "headers": [(b"content-length", str(100 * MiB).encode())],
    }
    asyncio.run(BodyLimitMiddleware(app, max_body_bytes=MiB)(scope, receive, send))
    assert not called
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"]) == {
        "detail": "the request body is larger than 1 MiB, the control plane's limit"
    }


def test_json_nested_too_deep_is_a_422_like_any_malformed_body(http: TestClient) -> None:
    """Python's JSON parser gives up near 1000 levels: FastAPI said ``400 There was an
    error parsing the body`` where the docs say a malformed body is a 422."""
    deep = b'{"name": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    resp = http.post(
        "/v1/streams", content=deep, headers={**AUTH, "content-type": "application/json"}
    )
    assert resp.status_code == 422
    assert resp.json() == {
        "detail": "the body is not valid JSON: it could not be parsed (nested too deep?)"
    }


def test_bodies_within_the_limits_are_served(http: TestClient) -> None:
    create_stream(http)  # an ordinary body
    nested = {"name": "deep", "cluster": "local-a", "config": {"a": [[[["x"]]]]}}
    resp = http.post("/v1/streams", json=nested, headers=AUTH)
    assert resp.status_code == 422  # the schema's answer
    assert "nested too deep" not in resp.json()["detail"]


def test_the_largest_legitimate_bodies_fit_with_margin() -> None:
    """The limit is sized for the largest bodies the API accepts in practice."""
    transition = {
        "cluster": "c" * 63,
        "topic": "t" * 249,
        "state": "sealed",
        "sealed_end_offsets": {str(p): 2**63 - 1 for p in range(10_000)},
    }
    cluster = {
        "name": "c" * 63,
        "bootstrap": "b" * 1024,
        "tags": {f"k{i:03d}" + "k" * 59: "v" * 255 for i in range(64)},
    }
    # A member holding every unit of a 10,000-partition, two-lane stream.
    unit = {
        "cluster": "kafka-eu-west-1a",
        "topic": "sp.payments-settlement-v2.realtime.e1234",
        "partition": 9999,
        "throughput": 123456.789,
        "backlog": 10**12,
    }
    ref = {k: unit[k] for k in ("cluster", "topic", "partition")}
    heartbeat = {"member_id": "m" * 200, "units": [unit] * 20_000, "claims": [ref] * 20_000}
    for body in (transition, cluster, heartbeat):
        size = len(json.dumps(body).encode())  # httpx's spacing, the larger
        assert size * 1.5 < DEFAULT_MAX_BODY_BYTES, size


def test_the_openapi_document_lists_413_and_503(http: TestClient) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    assert {"413", "503"} <= set(paths["/v1/streams"]["post"]["responses"])
    assert {"413", "503"} <= set(paths["/v1/clusters/{name}"]["patch"]["responses"])
    # Reads: the store may not answer.
    assert "503" in paths["/v1/clusters"]["get"]["responses"]
    assert "503" in paths["/v1/streams/{name}/routing"]["get"]["responses"]


def test_the_guard_raises_at_the_chunk_that_passes_a_limit() -> None:
    guard = BodyGuard(max_body_bytes=10)
    guard.feed(b"[1, 2, 3]")
    with pytest.raises(BodyRejected) as raised:
        guard.feed(b"  ")
    assert raised.value.status_code == 413


def test_the_limit_is_a_setting(
    settings: ControlPlaneSettings, service: ControlPlaneService
) -> None:
    """`serve --max-body-mb` sets it (it was the constant, whatever the deployment)."""
    small = settings.model_copy(update={"max_body_bytes": 2 * MiB})
    with TestClient(create_app(small, service)) as http:
        body = {"name": "c", "bootstrap": "h:1", "tags": {"k": "v" * (3 * MiB)}}
        resp = http.post("/v1/clusters", json=body, headers=AUTH)
        assert resp.status_code == 413
        assert resp.json() == {
            "detail": "the request body is larger than 2 MiB, the control plane's limit"
        }
        # A body the default would refuse is served under a larger limit.
    large = settings.model_copy(update={"max_body_bytes": 16 * MiB})
    with TestClient(create_app(large, service)) as http:
        body = {"name": "c", "bootstrap": "h:1", "tags": {"k": "v" * (9 * MiB)}}
        resp = http.post("/v1/clusters", json=body, headers=AUTH)
        assert resp.status_code == 422, resp.text  # past the limit: the schema's answer
    for bad in (0, -1):
        with pytest.raises(ValidationError, match="greater than 0"):
            ControlPlaneSettings(db_url="sqlite://", api_token="x" * 8, max_body_bytes=bad)


def test_serve_gives_the_app_its_max_body_mb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamplane.cli import control_plane as serve_module
    from streamplane.controlplane import app as app_module

    class Built(Exception):
        """Raised by the app factory: serve's settings seen, nothing served."""

    seen: list[ControlPlaneSettings] = []

    def create_app_(settings: ControlPlaneSettings, service: object = None) -> None:
        seen.append(settings)
        raise Built

    monkeypatch.setattr(app_module, "create_app", create_app_)
    monkeypatch.setattr(serve_module, "_log_to_stderr", lambda _level: None)
    args = [
        "serve", "--db", f"sqlite:///{tmp_path / 'cp.db'}", "--port", "0",
        "--token", "serve-test-token", "--no-import-local", "--no-health",
    ]  # fmt: skip
    for extra, limit in (([], DEFAULT_MAX_BODY_BYTES), (["--max-body-mb", "3"], 3 * MiB)):
        result = CliRunner().invoke(serve_module.control_plane, [*args, *extra])
        assert isinstance(result.exception, Built), result.output
        assert seen.pop().max_body_bytes == limit
    refused = CliRunner().invoke(serve_module.control_plane, [*args, "--max-body-mb", "0"])
    assert refused.exit_code == 2 and not seen
    assert "Invalid value for '--max-body-mb': 0 is not in the range x>=1." in refused.output
