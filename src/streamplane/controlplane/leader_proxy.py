"""A follower sends the Assigner's requests on to the leader.

Only the leader's Assigner answers group membership (two replicas each answering the
members that reached them gave every member every unit). So that consumers may talk to
any replica (a load balancer in front of them all, as for every other route), a
follower forwards the Assigner's routes to the leader's advertised URL, as the leader
last published it in the store (``FailoverStore.leader``), and answers with the
leader's answer. A request that was forwarded once is not forwarded again: a replica
that got one while not leading (leadership just moved) answers 503 and the member tries
again at its next heartbeat, keeping its units meanwhile.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

import httpx
from fastapi import Request, Response
from fastapi.responses import JSONResponse

log = logging.getLogger(__name__)

FORWARDED_BY = "X-Streamplane-Forwarded-By"
# The Assigner's routes: heartbeat, leave, a group's members, the groups it knows.
_ASSIGNER_ROUTE = re.compile(r"^/v1/(groups/[^/]+/(heartbeat|members(/[^/]+)?)|assigner/groups)$")
# Headers the leader needs: the token, the audit actor, the body's type.
_PASSED = ("authorization", "x-streamplane-actor", "content-type")
_TIMEOUT_S = 5.0


def is_assigner_route(path: str) -> bool:
    return _ASSIGNER_ROUTE.match(path) is not None


class LeaderProxy:
    """The middleware: ``is_leader`` says whether this replica leads, ``leader_url`` the
    leader's advertised URL (None when none is published), ``replica`` names this one."""

    def __init__(
        self,
        is_leader: Callable[[], bool],
        leader_url: Callable[[], str | None],
        replica: str,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._is_leader = is_leader
        self._leader_url = leader_url
        self._replica = replica
        self._transport = transport  # tests: the leader app in process
        self._client: httpx.AsyncClient | None = None

    async def __call__(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if self._is_leader() or not is_assigner_route(request.url.path):
            return await call_next(request)
        if request.headers.get(FORWARDED_BY):
            return _unavailable(
                "this control-plane replica is not the leader either (leadership is moving)"
            )
        url = self._leader_url()
        if url is None:
            return _unavailable(
                "this control-plane replica is a follower and knows no leader's URL (none "
                "published in the last 30 s: every replica needs --advertise-url)"
            )
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=_TIMEOUT_S, transport=self._transport)
        headers = {k: v for k, v in request.headers.items() if k.lower() in _PASSED}
        headers[FORWARDED_BY] = self._replica
        try:
            answer = await self._client.request(
                request.method,
                url.rstrip("/") + request.url.path,
                params=request.query_params,
                content=await request.body(),
                headers=headers,
            )
        except httpx.HTTPError as exc:
            # A timeout's message is empty: name the exception, always.
            text = " ".join(str(exc).split())
            reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
            log.warning(
                "forwarding %s to the leader at %s failed: %s", request.url.path, url, reason
            )
            return _unavailable(f"the leader at {url} does not answer ({type(exc).__name__})")
        passed = {
            k: v
            for k, v in answer.headers.items()
            if k.lower() in ("content-type", "retry-after", "www-authenticate")
        }
        return Response(answer.content, status_code=answer.status_code, headers=passed)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _unavailable(detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": "1"})
