"""The fleet dashboard: ``/ui``, plain HTML, CSS and one JavaScript file, served locally.

No build step and nothing from a CDN: the three files live in ``static/`` next to this
module and are served as they are. The page reads the control plane's own JSON API
(clusters, lag readers, streams and their routing, the audit log for epoch history and
failovers, groups and their lag history, dlq counts) and draws the time-lag chart as
inline SVG (its line broken where the lag is unknown). Views are addressed by the URL
fragment: ``/ui#/streams/<name>``, ``/ui#/groups/<group>``, the name percent-encoded (a
group id may hold "/": ``#/groups/team%2Fa``); a malformed one is shown as an error.
A cluster's health is the control plane's (``health`` of ``/v1/clusters``); what its
``__consumer_offsets`` reader says is shown beside it, as detail. A group's offset lag
that counts partitions at a stale end offset (``stale_end_offsets``: not read at the
last poll, a lower bound) reads ``5356 (2 stale)``, marked (``.stale``, the oldest age
on hover and under the group page's title), and so do those partitions' ends
(``1150 (stale 12.0 s)``) and offset lags in the group's partitions table.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoint annotations.
from importlib.resources import files

from fastapi import APIRouter, HTTPException
from fastapi.responses import RedirectResponse, Response

STATIC = files("streamplane.controlplane") / "static"

_FILES = {
    "index.html": "text/html; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}

router = APIRouter(include_in_schema=False)


@router.get("/ui")
def index() -> Response:
    return _serve("index.html")


@router.get("/ui/")
def index_slash() -> RedirectResponse:
    return RedirectResponse("/ui", status_code=307)


@router.get("/ui/{name}")
def asset(name: str) -> Response:
    return _serve(name)


def _serve(name: str) -> Response:
    media_type = _FILES.get(name)
    if media_type is None:
        raise HTTPException(404, f"no dashboard file {name!r}")
    body = (STATIC / name).read_bytes()
    return Response(body, media_type=media_type, headers={"Cache-Control": "no-cache"})
