"""Limits on request bodies, enforced before the body is read: ``BodyLimitMiddleware``.

A pure ASGI middleware (no ``BaseHTTPMiddleware``: nothing is buffered here). A body
whose ``Content-Length`` is above the limit is answered **413** at once, unread; a body
that streams in (chunked, or longer than it said) is counted chunk by chunk as the app
reads it and refused as soon as it passes the limit. The answer runs ahead of the token
check, the schema and the store: four parallel 100 MB POSTs without a token each got
their 401, but only after the server had read them (122 MB to 1.2 GB of memory).

A JSON body is also scanned for its nesting depth as it streams: Python's ``json``
parser gives up near 1000 levels (``RecursionError``), which FastAPI answered ``400
There was an error parsing the body``; deeper than ``MAX_JSON_DEPTH`` is a **422**
like any body the schema refuses. Both answers are the API's ``{"detail": "<one
line>"}``.

``BodyGuard`` is the pure part (counting, the depth scan); the middleware adapts it to
ASGI.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The largest body the API accepts. The largest legitimate ones: an Assigner heartbeat of
# a member holding every unit of a large stream (about 120 bytes per unit, listed in
# `units` and again in `claims`: 20,000 units are about 5 MB), a segment transition
# with 10,000 sealed_end_offsets (about 300 KB), a cluster with 64 tags of 255
# characters (about 20 KB).
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024

# Arrays and objects nested deeper are refused (the API's documents nest 3 levels).
MAX_JSON_DEPTH = 64

_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPENERS = frozenset(b"[{")
_CLOSERS = frozenset(b"]}")


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


def too_deep(max_depth: int) -> BodyRejected:
    return BodyRejected(
        422, f"the body is not valid JSON: arrays and objects nest deeper than {max_depth} levels"
    )


@dataclass
class BodyGuard:
    """One request body as it arrives: its size so far, and (for JSON) how deep the
    scan is in arrays and objects. ``feed`` raises ``BodyRejected`` at the chunk that
    passes a limit. The depth scan works on bytes: in UTF-8 no byte of a multi-byte
    character is a quote, a backslash or a bracket."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_json_depth: int | None = MAX_JSON_DEPTH  # None: not JSON, no scan
    received: int = 0
    depth: int = 0
    in_string: bool = False
    escaped: bool = False

    def feed(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > self.max_body_bytes:
            raise too_large(self.max_body_bytes)
        if self.max_json_depth is not None:
            self._scan(chunk)

    def _scan(self, chunk: bytes) -> None:
        assert self.max_json_depth is not None
        for byte in chunk:
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif byte == _BACKSLASH:
                    self.escaped = True
                elif byte == _QUOTE:
                    self.in_string = False
            elif byte == _QUOTE:
                self.in_string = True
            elif byte in _OPENERS:
                self.depth += 1
                if self.depth > self.max_json_depth:
                    raise too_deep(self.max_json_depth)
            elif byte in _CLOSERS:
                self.depth -= 1


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


def is_json(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether FastAPI reads the body as JSON: no ``Content-Type``, or a JSON one."""
    for name, value in headers:
        if name.lower() == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or (
                media.startswith(b"application/") and media.endswith(b"+json")
            )
    return True


class BodyLimitMiddleware:
    """Refuse request bodies over ``max_body_bytes`` (413) or nesting JSON deeper than
    ``max_json_depth`` (422), before they are read (see the module's docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_json_depth: int = MAX_JSON_DEPTH,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_json_depth = max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        length = declared_length(headers)
        if length is not None and length > self.max_body_bytes:
            await _answer(send, too_large(self.max_body_bytes))
            return
        guard = BodyGuard(self.max_body_bytes, self.max_json_depth if is_json(headers) else None)
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
