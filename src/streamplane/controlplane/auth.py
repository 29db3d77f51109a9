"""The API token: who may change things.

Mutations need ``Authorization: Bearer <token>``: without one the answer is 401 (with
``WWW-Authenticate: Bearer``), with a wrong one 403. A replica accepts its token and,
during a rotation, the previous ones it was given (``--previous-token``): restart the
replicas with the new token and the old one as previous, move the clients to the new
one, then restart without the old. Before, a new token refused every running client at
once, and a consumer whose heartbeats were refused handed out nothing, for good, while
its lag read OK.
"""

# No ``from __future__ import annotations``: FastAPI reads the dependency's annotations.

import hmac
from collections.abc import Sequence
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

bearer = HTTPBearer(auto_error=False, description="The control plane's API token.")

MISSING = "missing API token: send 'Authorization: Bearer <token>'"


class TokenCheck:
    """The accepted tokens (``app.state.token_check``), each compared in constant time."""

    def __init__(self, token: str, previous: Sequence[str] = ()) -> None:
        self._accepted = [t.encode() for t in (token, *previous)]

    def accepts(self, given: str) -> bool:
        # Every accepted token compared, whichever matches: the time says nothing of which.
        return sum(hmac.compare_digest(given.encode(), t) for t in self._accepted) > 0


def require_token(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    x_streamplane_actor: Annotated[
        str | None, Header(max_length=100, description="Who acts, for the audit log.")
    ] = None,
) -> str:
    """The dependency of every mutation: 401 without a bearer token, 403 with one the
    replica does not accept; else the actor recorded in the audit log (the
    ``X-Streamplane-Actor`` header on one printable line, or ``api``)."""
    if creds is None:
        scheme = request.headers.get("authorization", "").split(" ", 1)[0]
        detail = MISSING if not scheme else f"{MISSING} ({scheme!r} is not a bearer token)"
        raise HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})
    check: TokenCheck = request.app.state.token_check
    if not check.accepts(creds.credentials):
        raise HTTPException(403, "wrong API token")
    actor = " ".join((x_streamplane_actor or "").split())
    return actor if actor and actor.isprintable() else "api"


Actor = Annotated[str, Depends(require_token)]
