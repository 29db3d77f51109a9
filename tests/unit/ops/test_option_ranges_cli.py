"""Numeric options of the `ops` commands are checked when the command line is read, with
a message naming the valid range, before the cluster (or the control plane) is asked
anything. The old `ops map --tolerance 1.5` read the whole cluster and only then had the
mapper refuse it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from streamplane.ops.stub import StubOpsAdmin
from tests.unit.ops import test_apply_cli
from tests.unit.ops.test_apply_cli import Run

cli = test_apply_cli.cli  # fixture

BS = ("--bootstrap", "stub:9092")


@pytest.fixture(autouse=True)
def nothing_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_cluster(_bootstrap: str) -> StubOpsAdmin:
        raise AssertionError("the cluster was read")

    def no_control_plane(*_args: object) -> object:
        raise AssertionError("the control plane was asked")

    monkeypatch.setattr("streamplane.cli.ops.KafkaOpsAdmin", no_cluster)
    monkeypatch.setattr("streamplane.cli.ops.connect", no_control_plane)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("map", "rebalance", *BS, "--tolerance", "1.5"),
         "Invalid value for '--tolerance': 1.5 is not in the range 0<x<1"),
        (("map", "scale", *BS, "--tolerance", "0"),
         "Invalid value for '--tolerance': 0.0 is not in the range 0<x<1"),
        (("map", "rebalance", *BS, "--tolerance", "-0.1"), "is not in the range 0<x<1"),
        (("map", "rebalance", *BS, "--storage-threshold", "1"),
         "Invalid value for '--storage-threshold': 1.0 is not in the range 0<=x<1"),
        (("map", "rebalance", *BS, "--storage-threshold-bytes", "0"),
         "Invalid value for '--storage-threshold-bytes': must be at least 1 B"),
        (("map", "scale", *BS, "--partition-limit", "0"),
         "Invalid value for '--partition-limit': 0 is not in the range x>=1"),
        (("map", "rebuild", *BS, "--replication-factor", "0"),
         "Invalid value for '--replication-factor': 0 is not in the range x>=1"),
        (("map", "rebuild", *BS, "--min-rack-ids", "0"),
         "Invalid value for '--min-rack-ids': 0 is not in the range x>=1"),
        (("map", "rebuild", *BS, "--dead", "-1"),
         "Invalid value for '--dead': -1 is not in the range x>=0"),
        (("map", "rebuild", *BS, "--broker-rack", "1"),
         "Invalid value for --broker-rack: expected ID=RACK, got '1'"),
        (("map", "rebuild", "--cluster", "local-a", "--broker-rack", "x=a"),
         "Invalid value for --broker-rack: expected ID=RACK, got 'x=a'"),
        (("map", "rebuild", *BS, "--stall-window", "0"),
         "Invalid value for '--stall-window': 0.0 is not in the range x>0"),
        (("apply", "PLAN", *BS, "--stall-window", "-5"),
         "Invalid value for '--stall-window': -5.0 is not in the range x>0"),
        (("throttle", *BS, "--capacity", "10MB", "--give-up-after", "0"),
         "Invalid value for '--give-up-after': 0.0 is not in the range x>0"),
        (("tags", "create-topic", "local-a", "t", "--partitions", "0"),
         "Invalid value for '--partitions': 0 is not in the range x>=1"),
        (("tags", "create-topic", "local-a", "t", "--replication-factor", "0"),
         "Invalid value for '--replication-factor': 0 is not in the range x>=1"),
    ],
)  # fmt: skip
def test_out_of_range_options_are_refused_before_any_work(
    args: Sequence[str], message: str, cli: Callable[..., Run], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"version": 1, "partitions": []}')
    result = cli("ops", *[str(plan) if a == "PLAN" else a for a in args])
    assert result.code == 2, result.err
    assert message in " ".join(result.err.split()), result.err
    assert result.out == ""


@pytest.mark.parametrize("tolerance", ["0.01", "0.5", "0.99"])
def test_a_tolerance_in_range_goes_through(
    tolerance: str, monkeypatch: pytest.MonkeyPatch, cli: Callable[..., Run]
) -> None:
    """The command line is accepted: the command goes on to read the cluster."""
    reads: list[str] = []

    def read(bootstrap: str) -> StubOpsAdmin:
        reads.append(bootstrap)
        raise SystemExit(0)

    monkeypatch.setattr("streamplane.cli.ops.KafkaOpsAdmin", read)
    result = cli("ops", "map", "rebalance", *BS, "--tolerance", tolerance)
    assert result.code == 0, result.err
    assert reads == ["stub:9092"]
