"""``KafkaOpsAdmin`` over a kafka-python client whose metadata went stale: a broker that
died and came back is unknown to a long-lived client (``UnknownBrokerIdError``) until it
reads the metadata again, which it otherwise does only every 5 minutes."""

from __future__ import annotations

from typing import Any, ClassVar

import kafka.errors as kerr
import pytest

from streamplane.exceptions import KafkaError
from streamplane.ops.kafka_ops import ConfigChange, KafkaOpsAdmin
from tests.module_time import ModuleTime


class FakeAdminClient:
    """A kafka-python ``KafkaAdminClient`` that knows the brokers of its metadata (read
    when it is created, as kafka-python bootstraps)."""

    created: ClassVar[list[FakeAdminClient]] = []
    cluster_brokers: ClassVar[set[int]] = {1, 2, 3}

    def __init__(self, **_conf: Any) -> None:
        self.known = set(self.cluster_brokers)
        self.closed = False
        FakeAdminClient.created.append(self)

    def _send_to(self, broker: int) -> None:
        if broker not in self.known:
            raise kerr.UnknownBrokerIdError(broker)

    def describe_configs(self, resources: list[Any]) -> dict[str, Any]:
        self._send_to(int(resources[0].name))
        return {
            "broker": {resources[0].name: {"leader.replication.throttled.rate": {"value": "5"}}}
        }

    def alter_configs(self, resources: list[Any], *_args: Any) -> dict[str, Any]:
        for r in resources:
            self._send_to(int(r.name))
        return {"broker": {r.name: "OK" for r in resources}}

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_client(monkeypatch: pytest.MonkeyPatch) -> type[FakeAdminClient]:
    FakeAdminClient.created = []
    FakeAdminClient.cluster_brokers = {1, 2, 3}
    monkeypatch.setattr("kafka.admin.KafkaAdminClient", FakeAdminClient)
    monkeypatch.setattr("streamplane.ops.kafka_ops.time", ModuleTime(lambda _s: None))
    return FakeAdminClient


def test_a_broker_back_from_the_dead_is_reached_through_fresh_metadata(
    fake_client: type[FakeAdminClient],
) -> None:
    admin = KafkaOpsAdmin("h:1")
    first = fake_client.created[0]
    first.known.discard(3)  # the client saw broker 3 die; broker 3 is back since
    assert admin.describe_configs("broker", ["3"]) == {
        "3": {"leader.replication.throttled.rate": "5"}
    }
    assert first.closed and len(fake_client.created) == 2
    fake_client.created[-1].known.discard(3)
    change = ConfigChange("broker", "3", delete=("leader.replication.throttled.rate",))
    assert admin.alter_configs([change]) == {("broker", "3"): None}
    admin.close()


def test_a_broker_the_cluster_does_not_know_fails_after_a_few_fresh_clients(
    fake_client: type[FakeAdminClient],
) -> None:
    fake_client.cluster_brokers = {1, 2}
    admin = KafkaOpsAdmin("h:1", attempts=3)
    with pytest.raises(KafkaError, match="UnknownBrokerIdError"):
        admin.describe_configs("broker", ["3"])
    assert len(fake_client.created) == 3  # the first and two fresh ones, then it gave up
    assert [c.closed for c in fake_client.created] == [True, True, False]
