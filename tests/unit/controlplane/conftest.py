"""The control-plane app over a temporary SQLite file and a stub of the Kafka admin."""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest
from fastapi import FastAPI

from streamplane.cli.main import main
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.cluster_io import TopicDescription
from streamplane.controlplane.service import ControlPlaneService
from streamplane.controlplane.store import Store
from streamplane.exceptions import KafkaError

with warnings.catch_warnings():  # "install httpx2": the pinned httpx works
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TOKEN = "unit-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BOOTSTRAPS = {"local-a": "127.0.0.1:19092", "local-b": "127.0.0.1:19093"}


@dataclass
class StubKafka:
    """Every cluster's topics, by bootstrap; failures to inject by topic name."""

    topics: dict[str, dict[str, tuple[int, int, dict[str, str]]]] = field(default_factory=dict)
    fail_create: dict[str, KafkaError] = field(default_factory=dict)
    fail_delete: dict[str, KafkaError] = field(default_factory=dict)
    # Records written to a topic (all in partition 0), by topic name.
    written: dict[str, int] = field(default_factory=dict)
    # Bootstraps that answer, with their cluster id (the others do not answer).
    cluster_ids: dict[str, str] = field(
        default_factory=lambda: {b: f"id-{name}" for name, b in BOOTSTRAPS.items()}
    )
    # Live brokers, by bootstrap (1 when not given, as the local fleet's clusters).
    brokers: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def admin(self, bootstrap: str) -> StubAdmin:
        return StubAdmin(self, bootstrap)

    def on(self, cluster: str) -> dict[str, tuple[int, int, dict[str, str]]]:
        return self.topics.get(BOOTSTRAPS[cluster], {})


@dataclass
class StubAdmin:
    kafka: StubKafka
    bootstrap: str

    def create_topics(
        self, topics: Iterable[tuple[str, int, int, Mapping[str, str]]], timeout: float = 30.0
    ) -> dict[str, KafkaError | None]:
        out: dict[str, KafkaError | None] = {}
        with self.kafka.lock:
            existing = self.kafka.topics.setdefault(self.bootstrap, {})
            for name, partitions, replication, config in topics:
                if name in self.kafka.fail_create:
                    out[name] = self.kafka.fail_create[name]
                elif name in existing:
                    out[name] = KafkaError(f"{name} exists", code="TOPIC_ALREADY_EXISTS")
                else:
                    existing[name] = (partitions, replication, dict(config))
                    out[name] = None
        return out

    def cluster_id(self, timeout: float = 5.0) -> str:
        if self.bootstrap not in self.kafka.cluster_ids:
            raise KafkaError(f"{self.bootstrap}: no broker answered", code="_TRANSPORT")
        return self.kafka.cluster_ids[self.bootstrap]

    def live_broker_count(self, timeout: float = 5.0) -> int:
        self.cluster_id(timeout)  # raises if it does not answer
        return self.kafka.brokers.get(self.bootstrap, 1)

    def describe_topic(self, topic: str, timeout: float = 10.0) -> TopicDescription:
        with self.kafka.lock:
            found = self.kafka.topics.get(self.bootstrap, {}).get(topic)
        if found is None:
            raise KafkaError(f"{topic} unknown", code="UNKNOWN_TOPIC_OR_PART")
        partitions, replication, config = found
        return TopicDescription(topic, partitions, (replication,), dict(config))

    def end_offsets(self, topic: str, timeout: float = 10.0) -> dict[int, int]:
        with self.kafka.lock:
            found = self.kafka.topics.get(self.bootstrap, {}).get(topic)
            if found is None:
                return {}
            return {p: self.kafka.written.get(topic, 0) if p == 0 else 0 for p in range(found[0])}

    def delete_topics(
        self, names: Iterable[str], timeout: float = 30.0
    ) -> dict[str, KafkaError | None]:
        out: dict[str, KafkaError | None] = {}
        with self.kafka.lock:
            existing = self.kafka.topics.setdefault(self.bootstrap, {})
            for name in names:
                if name in self.kafka.fail_delete:
                    out[name] = self.kafka.fail_delete[name]
                elif existing.pop(name, None) is None:
                    out[name] = KafkaError(f"{name} unknown", code="UNKNOWN_TOPIC_OR_PART")
                else:
                    out[name] = None
        return out


@pytest.fixture
def kafka() -> StubKafka:
    return StubKafka()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cp.db'}"


@pytest.fixture
def settings(db_url: str) -> ControlPlaneSettings:
    return ControlPlaneSettings(
        db_url=db_url,
        api_token=TOKEN,
        watch_timeout_default=2.0,
        watch_poll_interval=0.05,
        lag_monitor=False,
    )


def make_service(db_url: str, kafka: StubKafka) -> ControlPlaneService:
    return ControlPlaneService(Store(db_url), kafka.admin)


@pytest.fixture
def service(db_url: str, kafka: StubKafka) -> Iterator[ControlPlaneService]:
    svc = make_service(db_url, kafka)
    for name, bootstrap in BOOTSTRAPS.items():
        svc.register_cluster(name, bootstrap, {"env": "local"})
    yield svc
    svc.close()


@pytest.fixture
def app(settings: ControlPlaneSettings, service: ControlPlaneService) -> FastAPI:
    return create_app(settings, service)


@pytest.fixture
def http(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as client:
        yield client


def create_stream(http: TestClient, name: str = "orders", **extra: object) -> dict[str, object]:
    resp = http.post(
        "/v1/streams", json={"name": name, "cluster": "local-a", **extra}, headers=AUTH
    )
    assert resp.status_code == 201, resp.text
    body: dict[str, object] = resp.json()
    return body


# ``run(*args) -> (exit code, stdout, stderr)``: see ``cli_over``.
CliRun = Callable[..., tuple[int, str, str]]


def cli_over(
    http: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *modules: ModuleType,
) -> CliRun:
    """``streamplane *args`` as a user runs it (``main``: an error is one line and exit
    code 1), the commands of the CLI ``modules`` talking to the app behind ``http``."""

    @contextmanager
    def connect(url: str, token: str | None) -> Iterator[ControlPlaneClient]:
        with ControlPlaneClient("http://testserver", TOKEN) as cp:
            # A TestClient is an httpx.Client: this one sends the client's headers (its
            # token) to the app (whose lifespan ``http`` runs).
            own, cp._http = cp._http, TestClient(http.app, headers=dict(cp._http.headers))
            own.close()
            yield cp

    for module in modules:
        monkeypatch.setattr(module, "connect", connect)

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["streamplane", *args])
        with pytest.raises(SystemExit) as exited:
            main()
            raise SystemExit(0)
        out = capsys.readouterr()
        return int(exited.value.code or 0), out.out, out.err

    return run
