"""`ops apply` shows the storage picture of the `ops map` plan it applies: the plan carries
the `--capacity` it was made with (the old apply read the brokers' disks whatever the plan
assumed), and without one apply repeats map's warning about brokers sharing one
filesystem (the local fleet). Its lines without a terminal start with the time."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from streamplane.ops.stub import StubOpsAdmin
from tests.unit.ops import test_apply_cli
from tests.unit.ops.test_apply_cli import FAST, MB, Run

cli = test_apply_cli.cli  # fixture

SHARED = "they probably share one filesystem"


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> StubOpsAdmin:
    """Four brokers on one 80 GiB filesystem (as the local fleet): every broker reports
    the same free storage whatever it holds. ``orders`` on brokers 1 and 2, uneven."""
    admin = StubOpsAdmin.cluster(
        {1: "a", 2: "b", 3: "c", 4: "a"},
        {("orders", p): (1, 2) if p < 4 else (2, 3) for p in range(6)},
        sizes={("orders", p): (p + 1) * 20 * MB for p in range(6)},
        total_bytes=80 << 30,
    )
    admin.shared_filesystem = True
    monkeypatch.setattr("streamplane.cli.ops.KafkaOpsAdmin", lambda _bootstrap: admin)
    return admin


def _storage(out: str) -> list[list[str]]:
    """Per broker row of the diff table: id, free before, free after; and the range line."""
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s+\d+ ", line)]
    picture = [[r[0], *r[-2:]] for r in rows]
    picture += [[line] for line in out.splitlines() if line.startswith("free storage range")]
    return picture


def _map(cli: Callable[..., Run], plan: Path, *extra: str) -> Run:
    planned = cli(
        "ops", "map", "scale", *FAST[:2], "--topics", "orders", "--new", "4",
        "--strategy", "count", "--out", str(plan), *extra,
    )  # fmt: skip
    assert planned.code == 0, planned.err
    return planned


def test_apply_shows_the_storage_the_plan_was_made_with(
    shared: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    planned = _map(cli, plan, "--capacity", "1GB")
    declined = cli("ops", "apply", str(plan), *FAST[:2], stdin="n\n")
    assert declined.code == 1 and "not applied" in declined.err
    assert len(_storage(planned.out)) == 5  # four brokers and the range
    assert _storage(declined.out) == _storage(planned.out)
    assert json.loads(plan.read_text())["streamplane"] == {"capacity": 10**9}
    assert "GiB" not in declined.out  # the disk's 80 GiB, as the old apply showed
    assert "storage per broker: 953.7MiB as planned (ops map --capacity)" in declined.err
    assert SHARED not in declined.err  # a capacity makes the disk figures irrelevant


def test_apply_repeats_the_shared_filesystem_warning_of_the_plan(
    shared: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    planned = _map(cli, plan)
    assert SHARED in planned.err
    declined = cli("ops", "apply", str(plan), *FAST[:2], stdin="n\n")
    assert declined.code == 1
    warnings = [line for line in declined.err.splitlines() if SHARED in line]
    assert warnings == [line for line in planned.err.splitlines() if SHARED in line]
    assert _storage(declined.out) == _storage(planned.out)
    assert json.loads(plan.read_text())["streamplane"] == {"capacity": None}


def test_a_plan_with_a_bad_capacity_is_refused(
    shared: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    doc = {"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [4, 2]}],
           "streamplane": {"capacity": "1GB"}}  # fmt: skip
    plan.write_text(json.dumps(doc))
    refused = cli("ops", "apply", str(plan), *FAST[:2], "--yes")
    assert refused.code == 1
    assert "streamplane.capacity must be a size in bytes (>= 1), got '1GB'" in refused.err
    assert shared.calls == []


STAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ")


def test_without_a_terminal_apply_lines_start_with_the_time(
    shared: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    shared.reassignment_steps = 3
    plan = tmp_path / "plan.json"
    _map(cli, plan, "--capacity", "1GB")
    state = tmp_path / "state.json"
    applied = cli(
        "ops", "apply", str(plan), *FAST, "--autothrottle", "2MB", "--state-file", str(state),
        "--yes",
    )  # fmt: skip
    assert applied.code == 0, applied.err
    lines = [line for line in applied.err.splitlines() if "partitions  batch" in line]
    assert lines and all(STAMPED.match(line) for line in lines), lines
    warnings = [line for line in applied.err.splitlines() if "has no traffic figures" in line]
    assert warnings and all(STAMPED.match(line) for line in warnings), warnings
