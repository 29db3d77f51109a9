"""Limits on request bodies, enforced before the body is read: ``BodyLimitMiddleware``.

A pure ASGI middleware (no ``BaseHTTPMiddleware``: nothing is buffered here). A body
whose ``Content-Length`` is above the limit is answered **413** at once, unread; a body
that streams in (chunked, or longer than it said) is counted chunk by chunk as the app
reads it and refused as soon as it passes the limit. The answer runs ahead of the token
check, the schema and the store: four parallel 100 MB POSTs without a token each got
their 401, but only after the server had read them (122 MB to 1.2 GB of memory).

``BodyGuard`` is the pure part (counting); the middleware adapts it to ASGI.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The largest body the API accepts. The largest legitimate ones: an Assigner heartbeat of
# a member holding every unit of a large stream (about 120 bytes per unit, listed in
# `units` and again in `claims`: 20,000 units are about 5 MB), a segment transition
# with 10,000 sealed_end_offsets (about 300 KB), a cluster with 64 tags of 255
# characters (about 20 KB). `control-plane serve --max-body-mb` sets another
# (``ControlPlaneSettings.max_body_bytes``).
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


class BodyRejected(Exception):
    """A body over a limit: the answer's status and detail."""

    def __init__(self, status_code: int, detail: str) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n % (1024 * 1024) == 0 else f"{n} bytes"


def too_large(max_body_bytes: int) -> BodyRejected:
    return BodyRejected(
        413, f"the request body is larger than {_size(max_body_bytes)}, the control plane's limit"
    )


@dataclass
class BodyGuard:
    """One request body as it arrives: ``feed`` raises ``BodyRejected`` at the chunk
    that passes the limit."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    received: int = 0

    def feed(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > self.max_body_bytes:
            raise too_large(self.max_body_bytes)


def declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The ``Content-Length`` of a request (None: absent or not a number; the server
    refuses a malformed one before the app sees it)."""
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimitMiddleware:
    """Refuse request bodies over ``max_body_bytes`` (413) before they are read (see the
    module's docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        length = declared_length(headers)
        if length is not None and length > self.max_body_bytes:
            await _answer(send, too_large(self.max_body_bytes))
            return
        guard = BodyGuard(self.max_body_bytes)
        started = answered = False

        # A body that passes a limit is answered here, at once, and the app reading it
        # is told the client left (``http.disconnect``): raising would not reach us
        # through FastAPI (which makes any error while reading a body its own ``400
        # There was an error parsing the body``) nor through the leader proxy's
        # BaseHTTPMiddleware (which wraps it in an ExceptionGroup).
        async def guarded_receive() -> Message:
            nonlocal answered
            if answered:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request" and not started:
                try:
                    guard.feed(message.get("body", b""))
                except BodyRejected as exc:
                    answered = True
                    await _answer(send, exc)
                    return {"type": "http.disconnect"}
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            if answered:  # the app's answer to the disconnect: ours was sent
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, guarded_receive, watched_send)
        except Exception:
            if not answered:  # else: the app failing to read what it was refused
                raise


async def _answer(send: Send, exc: BodyRejected) -> None:
    body = json.dumps({"detail": exc.detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": exc.status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),  # the rest of the body is not read
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
