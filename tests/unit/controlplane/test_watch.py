"""The routing watch (long poll): answers at once, on a change, on timeout, on deletion."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
import httpx
from fastapi import FastAPI

from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.watch import WatchHub
from tests.unit.controlplane.conftest import AUTH, StubKafka, make_service

ROUTING = "/v1/streams/orders/routing"


def run(app: FastAPI, scenario: Callable[[httpx.AsyncClient], Awaitable[None]]) -> None:
    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://cp") as client:
            await scenario(client)

    asyncio.run(main())


async def until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0.005)


async def create(client: httpx.AsyncClient) -> None:
    resp = await client.post(
        "/v1/streams", json={"name": "orders", "cluster": "local-a"}, headers=AUTH
    )
    assert resp.status_code == 201, resp.text


def hub(app: FastAPI) -> WatchHub:
    h: WatchHub = app.state.hub
    return h


def test_answers_at_once_when_the_epoch_is_newer(app: FastAPI) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        await create(client)
        resp = await client.get(ROUTING, params={"after_epoch": 0, "timeout": 60})
        assert resp.json()["epoch"] == 1
        resp = await client.get(ROUTING)  # no after_epoch: a plain read
        assert resp.json()["epoch"] == 1

    run(app, scenario)


def test_answers_on_timeout_with_the_same_epoch(app: FastAPI) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        await create(client)
        resp = await client.get(ROUTING, params={"after_epoch": 1, "timeout": 0.2})
        assert resp.status_code == 200
        assert resp.json()["epoch"] == 1
        assert hub(app).waiting == 0

    run(app, scenario)


def test_answers_when_a_failover_is_published(app: FastAPI) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        await create(client)
        watch = asyncio.create_task(client.get(ROUTING, params={"after_epoch": 1, "timeout": 60}))
        await until(lambda: hub(app).waiting == 1)
        moved = await client.post(
            "/v1/streams/orders/failover", json={"cluster": "local-b"}, headers=AUTH
        )
        assert moved.status_code == 200
        resp = await watch
        assert resp.json()["epoch"] == 2
        assert resp.json() == moved.json()

    run(app, scenario)


def test_a_hundred_watchers_share_no_threads(app: FastAPI) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        await create(client)
        threads_before = threading.active_count()
        watches = [
            asyncio.create_task(client.get(ROUTING, params={"after_epoch": 1, "timeout": 60}))
            for _ in range(100)
        ]
        await until(lambda: hub(app).waiting == 100)
        # Parked waiters hold no thread: only the bounded worker pool (the reads) exists.
        pool = anyio.to_thread.current_default_thread_limiter().total_tokens
        assert threading.active_count() - threads_before <= pool < 100
        await client.post("/v1/streams/orders/failover", json={"cluster": "local-b"}, headers=AUTH)
        answers = await asyncio.gather(*watches)
        assert {r.json()["epoch"] for r in answers} == {2}
        assert hub(app).waiting == 0

    run(app, scenario)


def test_a_change_by_another_replica_is_seen_by_polling(
    app: FastAPI, settings: ControlPlaneSettings, db_url: str, kafka: StubKafka
) -> None:
    other = make_service(db_url, kafka)  # a second replica over the same database

    async def scenario(client: httpx.AsyncClient) -> None:
        await create(client)
        watch = asyncio.create_task(client.get(ROUTING, params={"after_epoch": 1, "timeout": 60}))
        await until(lambda: hub(app).waiting == 1)
        await asyncio.to_thread(other.failover, "orders", "local-b")
        resp = await watch
        assert resp.json()["epoch"] == 2

    run(app, scenario)
    other.close()


def test_deleting_the_stream_releases_watchers_with_404(app: FastAPI) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        await create(client)
        watch = asyncio.create_task(client.get(ROUTING, params={"after_epoch": 1, "timeout": 60}))
        await until(lambda: hub(app).waiting == 1)
        assert (await client.delete("/v1/streams/orders", headers=AUTH)).status_code == 204
        resp = await watch
        assert resp.status_code == 404

    run(app, scenario)


def test_closing_the_hub_answers_waiters_now(app: FastAPI) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        await create(client)
        watch = asyncio.create_task(client.get(ROUTING, params={"after_epoch": 1, "timeout": 60}))
        await until(lambda: hub(app).waiting == 1)
        hub(app).close_threadsafe()
        resp = await watch
        assert resp.json()["epoch"] == 1

    run(app, scenario)


def test_watch_parameters_are_validated(app: FastAPI) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        await create(client)
        for params in ({"timeout": 61}, {"timeout": -1}, {"after_epoch": "x"}):
            resp = await client.get(ROUTING, params=params)
            assert resp.status_code == 422, params
            assert isinstance(resp.json()["detail"], str)
        for not_finite in ("nan", "inf"):
            resp = await client.get(ROUTING, params={"timeout": not_finite})
            assert resp.status_code == 422
            assert "finite number" in resp.json()["detail"], resp.json()

    run(app, scenario)


def test_default_timeout_comes_from_settings(db_url: str, kafka: StubKafka) -> None:
    settings = ControlPlaneSettings(
        db_url=db_url,
        api_token="x" * 16,
        watch_timeout_default=0.1,
        watch_timeout_max=5,
        lag_monitor=False,
    )
    service = make_service(db_url, kafka)
    service.register_cluster("local-a", "127.0.0.1:19092")
    app = create_app(settings, service)

    async def scenario(client: httpx.AsyncClient) -> None:
        headers: Any = {"Authorization": "Bearer " + "x" * 16}
        await client.post(
            "/v1/streams", json={"name": "orders", "cluster": "local-a"}, headers=headers
        )
        resp = await client.get(ROUTING, params={"after_epoch": 1})
        assert resp.json()["epoch"] == 1
        assert (await client.get(ROUTING, params={"timeout": 6})).status_code == 422

    run(app, scenario)
    service.close()
