"""A follower forwards the Assigner's routes to the leader (``leader_proxy``)."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from streamplane.controlplane.leader_proxy import FORWARDED_BY, LeaderProxy, is_assigner_route


def leader_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/groups/{group}/heartbeat")
    async def heartbeat(group: str, request: Request) -> dict[str, object]:
        return {
            "group": group,
            "body": await request.json(),
            "auth": request.headers.get("authorization"),
            "by": request.headers.get(FORWARDED_BY),
        }

    return app


def follower(leader_url: str | None, leading: bool = False) -> TestClient:
    app = FastAPI()

    @app.get("/v1/streams")
    def streams() -> list[str]:
        return ["served here"]

    @app.post("/v1/groups/{group}/heartbeat")
    def heartbeat(group: str) -> dict[str, str]:
        return {"served": "here"}

    proxy = LeaderProxy(
        lambda: leading,
        lambda: leader_url,
        "follower-1",
        transport=httpx.ASGITransport(app=leader_app()),
    )
    app.middleware("http")(proxy)
    return TestClient(app)


def test_a_follower_forwards_the_assigner_routes_to_the_leader() -> None:
    with follower("http://leader:8080") as client:
        resp = client.post(
            "/v1/groups/g1/heartbeat", json={"member_id": "m"}, headers={"Authorization": "t"}
        )
        assert resp.status_code == 200, resp.text
        assert resp.json() == {
            "group": "g1",
            "body": {"member_id": "m"},
            "auth": "t",
            "by": "follower-1",
        }
        assert client.get("/v1/streams").json() == ["served here"]  # other routes: here


def test_the_leader_serves_them_itself() -> None:
    with follower("http://leader:8080", leading=True) as client:
        assert client.post("/v1/groups/g1/heartbeat", json={}).json() == {"served": "here"}


@pytest.mark.parametrize(
    ("leader_url", "headers", "detail"),
    [
        (None, {}, "knows no leader's URL"),
        ("http://leader:8080", {FORWARDED_BY: "other"}, "not the leader either"),
    ],
)
def test_no_leader_or_a_second_hop_is_503(
    leader_url: str | None, headers: dict[str, str], detail: str
) -> None:
    with follower(leader_url) as client:
        resp = client.post("/v1/groups/g1/heartbeat", json={}, headers=headers)
        assert resp.status_code == 503 and resp.headers["Retry-After"] == "1"
        assert detail in resp.json()["detail"]


def test_which_routes_are_the_assigners() -> None:
    assert is_assigner_route("/v1/groups/g/heartbeat")
    assert is_assigner_route("/v1/groups/g/members")
    assert is_assigner_route("/v1/groups/g/members/m-1")
    assert is_assigner_route("/v1/assigner/groups")  # the groups it knows
    assert not is_assigner_route("/v1/groups")  # the lag monitor's, any replica's
    assert not is_assigner_route("/v1/assigner/groups/g")
    assert not is_assigner_route("/v1/groups/g/lag/history")


class _Failing(httpx.AsyncBaseTransport):
    def __init__(self, exc: httpx.HTTPError) -> None:
        self.exc = exc

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise self.exc


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (httpx.ReadTimeout(""), "ReadTimeout"),  # a timeout's message is empty
        (httpx.ConnectError("All connection attempts failed"), "ConnectError: All connection"),
    ],
)
def test_a_failed_forward_is_logged_with_its_reason(
    exc: httpx.HTTPError, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = FastAPI()
    app.middleware("http")(
        LeaderProxy(lambda: False, lambda: "http://leader:8080", "f-1", transport=_Failing(exc))
    )
    with TestClient(app) as client:
        resp = client.post("/v1/groups/g1/heartbeat", json={})
    assert resp.status_code == 503
    assert type(exc).__name__ in resp.json()["detail"]
    lines = [r.getMessage() for r in caplog.records if "forwarding" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "forwarding /v1/groups/g1/heartbeat to the leader at http://leader:8080 failed: " + reason
    ), lines
