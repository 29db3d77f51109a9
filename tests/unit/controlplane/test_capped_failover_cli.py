"""A failover to a cluster with fewer live brokers than the stream's replication factor
(a broker down) is capped, not refused: the CLI says so, and `streams describe` shows the
active segments' replication where it is not the stream's own. Before, only the control
plane's log told: the failover printed the routing, and `describe` showed "replication
factor 3 ... min.insync.replicas=2" for topics made with 2 and 1."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from streamplane.cli import streams as streams_cli
from tests.unit.controlplane.conftest import BOOTSTRAPS, StubKafka, cli_over, create_stream

ON_A, ON_B = BOOTSTRAPS["local-a"], BOOTSTRAPS["local-b"]
CAPPED = (
    "replication factor 2, min.insync.replicas=1, not the stream's 3 and 2 "
    "(local-b had 2 live brokers)"
)


def test_a_capped_failover_is_told_and_described(
    http: TestClient,
    kafka: StubKafka,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kafka.brokers.update({ON_A: 3, ON_B: 2})  # local-b: one of its 3 brokers is down
    create_stream(http)
    run = cli_over(http, monkeypatch, capsys, streams_cli)
    code, out, err = run("streams", "failover", "orders", "--to", "local-b")
    assert code == 0, err
    assert f"warning: the new topics on local-b have {CAPPED}" in err
    assert "now at epoch 2" in out

    code, out, err = run("streams", "describe", "orders")
    assert code == 0, err
    assert "replication factor 3" in out  # the stream's own, for its next moves
    assert f"active       sp.orders.realtime.e2, sp.orders.bulk.e2 on local-b: {CAPPED}" in out

    kafka.brokers[ON_A] = 3
    code, out, err = run("streams", "failover", "orders", "--to", "local-a")
    assert code == 0, err
    assert "warning" not in err  # the stream's own again
    code, out, err = run("streams", "describe", "orders")
    assert "\nactive       " not in out


def test_an_uncapped_failover_says_nothing_more(
    http: TestClient,
    kafka: StubKafka,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kafka.brokers.update({ON_A: 3, ON_B: 3})
    create_stream(http)
    run = cli_over(http, monkeypatch, capsys, streams_cli)
    code, out, err = run("streams", "failover", "orders", "--to", "local-b")
    assert code == 0, err
    assert err == ""
    code, out, err = run("streams", "describe", "orders")
    assert code == 0, err
    assert "\nactive       " not in out
