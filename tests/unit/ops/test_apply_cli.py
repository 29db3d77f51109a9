"""`streamplane ops apply` and `ops map` end to end through the CLI's entry point (exit
codes included), on the in-memory stub cluster: a dead-broker rebuild with autothrottle,
a timeout that leaves the batch running, SIGTERM, a declined prompt, planner messages."""

from __future__ import annotations

import io
import json
import re
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamplane.cli.main import main
from streamplane.core.mapper.models import TopicPartition
from streamplane.ops.autothrottle import default_state_file
from streamplane.ops.kafka_ops import Reassignment
from streamplane.ops.stub import StubOpsAdmin

MB = 1_000_000


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> StubOpsAdmin:
    """Four brokers (racks a, b, c, a); topic ``orders`` on brokers 1-3, RF 3. Every
    command of the test talks to this one stub."""
    admin = StubOpsAdmin.cluster(
        {1: "a", 2: "b", 3: "c", 4: "a"},
        {("orders", p): tuple((p + i) % 3 + 1 for i in range(3)) for p in range(3)},
        sizes={("orders", p): 2 * MB for p in range(3)},
        reassignment_steps=4,
    )
    monkeypatch.setattr("streamplane.cli.ops.KafkaOpsAdmin", lambda _bootstrap: admin)
    return admin


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    def run(*args: str, stdin: str = "") -> Run:
        monkeypatch.setattr(sys, "argv", ["streamplane", *args])
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


THROTTLED = ("--autothrottle", "2MB", "--min-rate", "1MB", "--max-rate", "2MB")
FAST = ("--bootstrap", "stub:9092", "--poll-interval", "0.01")


def _plan(path: Path, *entries: tuple[str, int, list[int]]) -> Path:
    doc = {
        "version": 1,
        "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries],
    }
    path.write_text(json.dumps(doc))
    return path


def test_dead_broker_rebuild_applies_with_autothrottle(
    cluster: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    cluster.dead.add(1)
    plan = tmp_path / "plan.json"
    planned = cli(
        "ops", "map", "rebuild", *FAST[:2], "--topics", "orders", "--dead", "1", "--new", "4",
        "--substitution-affinity", "--out", str(plan),
    )  # fmt: skip
    assert planned.code == 0, planned.err
    state = tmp_path / "state.json"
    applied = cli("ops", "apply", str(plan), *FAST, *THROTTLED, "--state-file", str(state), "--yes")
    assert applied.code == 0, applied.err
    assert "3 partition(s) reassigned" in applied.out
    assert all(4 in r and 1 not in r for r in cluster.replicas.values())
    configured = {c.name for call, changes in cluster.calls if call == "alter_configs"
                  for c in changes if c.kind == "broker"}  # fmt: skip
    assert configured == {"2", "3", "4"}  # the live brokers were throttled, broker 1 left out
    assert cluster.throttle_configs() == {}
    assert not state.exists()


def test_a_timeout_leaves_the_batch_running_with_its_throttles_until_cancel(
    cluster: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    cluster.reassignment_steps = 10**6
    plan = _plan(tmp_path / "plan.json", ("orders", 0, [4, 2, 3]))
    state = tmp_path / "state.json"
    gave_up = cli(
        "ops", "apply", str(plan), *FAST, *THROTTLED, "--state-file", str(state),
        "--timeout", "0.1", "--yes",
    )  # fmt: skip
    assert gave_up.code == 1
    error = gave_up.err.strip().splitlines()[-1]
    assert error.startswith("error: 1 partition(s) not reassigned after 0.1s (e.g. orders-0)")
    assert "they keep running" in error and str(state) in error
    assert list(cluster.running) == [("orders", 0)]
    assert ("broker", "4") in cluster.throttle_configs()
    assert state.exists()

    cancelled = cli("ops", "apply", "--cancel", *FAST[:2], "--state-file", str(state), "--yes")
    assert cancelled.code == 0, cancelled.err
    assert "cancelled 1 reassignment(s)" in cancelled.out
    assert "removed throttles from 5 resource(s)" in cancelled.out
    assert cluster.running == {} and cluster.throttle_configs() == {}
    assert not state.exists()


def test_sigterm_cancels_clears_and_exits_143(
    monkeypatch: pytest.MonkeyPatch, cli: Callable[..., Run], tmp_path: Path
) -> None:
    class TerminatedWhileWaiting(StubOpsAdmin):
        sent = False

        def list_reassignments(self) -> dict[TopicPartition, Reassignment]:
            running = super().list_reassignments()
            if running and not self.sent:
                self.sent = True
                signal.raise_signal(signal.SIGTERM)
            return running

    admin = TerminatedWhileWaiting.cluster(
        {1: "a", 2: "b", 3: "c", 4: "a"}, {("orders", 0): (1, 2, 3)}, reassignment_steps=10**6
    )
    monkeypatch.setattr("streamplane.cli.ops.KafkaOpsAdmin", lambda _bootstrap: admin)
    plan = _plan(tmp_path / "plan.json", ("orders", 0, [4, 2, 3]))
    state = tmp_path / "state.json"
    result = cli("ops", "apply", str(plan), *FAST, *THROTTLED, "--state-file", str(state), "--yes")
    assert result.code == 143, result.err
    assert (
        "received SIGTERM: reassignments: 1 cancelled (orders-0); throttles removed" in result.err
    )
    assert admin.running == {} and admin.replicas[("orders", 0)] == (1, 2, 3)
    assert admin.throttle_configs() == {} and not state.exists()


@pytest.mark.parametrize(
    ("command", "stdin"), [("apply", "n\n"), ("map", "n\n"), ("apply", ""), ("map", "")]
)
def test_declining_the_prompt_exits_1_and_applies_nothing(
    command: str, stdin: str, cluster: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    """No, or no answer at all (end of input, as from a script): not applied, exit 1."""
    if command == "apply":
        args: Sequence[str] = (
            "ops",
            "apply",
            str(_plan(tmp_path / "p.json", ("orders", 0, [4, 2, 3]))),
        )
    else:
        args = ("ops", "map", "scale", "--new", "4", "--strategy", "count", "--apply")
    result = cli(*args, *FAST, stdin=stdin)
    assert result.code == 1, result.err
    assert "[y/N]" in result.err and "not applied" in result.err
    if not stdin:
        assert "--yes" in result.err
    assert not any(call == "alter_reassignments" for call, _ in cluster.calls)


def test_planner_messages_name_the_flags(cluster: StubOpsAdmin, cli: Callable[..., Run]) -> None:
    result = cli(
        "ops", "map", "rebuild", *FAST[:2], "--topics", "orders", "--force",
        "--replication-factor", "4",
    )  # fmt: skip
    assert result.code == 1
    assert "needs 4 distinct racks" in result.err
    assert "pass --min-rack-ids 3 to accept fewer racks" in result.err, result.err
    assert "min_rack_ids" not in result.err


def test_the_state_file_help_says_what_the_default_is(cli: Callable[..., Run]) -> None:
    for command in (("throttle",), ("apply",)):
        shown = " ".join(cli("ops", *command, "--help").out.split())
        pattern = re.search(r"\.streamplane/ops/autothrottle-<hash>\.json", shown)
        assert pattern is not None, shown
    default = default_state_file("127.0.0.1:9092")
    assert default.parent == Path(".streamplane") / "ops"
    assert re.fullmatch(r"autothrottle-[0-9a-f]{12}\.json", default.name)


@pytest.mark.parametrize(
    "args",
    [
        ("ops", "throttle", "--capacity", "0"),
        ("ops", "throttle", "--capacity", "10MB", "--min-rate", "0.1"),
        ("ops", "apply", "PLAN", "--autothrottle", "0MB", "--poll-interval", "0.01"),
    ],
)
def test_a_zero_rate_is_refused(
    args: Sequence[str], cluster: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    """A zero byte rate would stop replication (or divide by it): refused, naming the flag."""
    plan = str(_plan(tmp_path / "p.json", ("orders", 0, [4, 2, 3])))
    result = cli(*[plan if a == "PLAN" else a for a in args], "--bootstrap", "stub:9092")
    assert result.code == 2, result.err
    assert "must be at least 1 B" in result.err
    assert cluster.calls == []


@pytest.fixture
def mixed(cluster: StubOpsAdmin) -> StubOpsAdmin:
    """Topic ``single``: partition 0 on brokers 1 and 2, partitions 1 and 2 on one broker
    (as an ``ops apply --allow-mixed-replication`` of one partition leaves it)."""
    cluster.replicas.update({("single", 0): (1, 2), ("single", 1): (1,), ("single", 2): (2,)})
    return cluster


def test_apply_refuses_a_plan_leaving_mixed_replica_counts_naming_the_flag(
    mixed: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    plan = str(_plan(tmp_path / "p.json", ("single", 1, [1, 3])))
    refused = cli("ops", "apply", plan, *FAST, "--yes")
    assert refused.code == 1
    assert "plan refused, nothing applied" in refused.err
    assert "different replica counts [1, 2]" in refused.err
    assert "--allow-mixed-replication accepts it" in refused.err, refused.err
    assert "allow_mixed_replication" not in refused.err
    assert not any(call == "alter_reassignments" for call, _ in mixed.calls)
    applied = cli("ops", "apply", plan, *FAST, "--yes", "--allow-mixed-replication")
    assert applied.code == 0, applied.err
    assert mixed.replicas[("single", 1)] == (1, 3)


def test_map_apply_on_a_mixed_topic_names_the_flag_and_accepts_it(
    mixed: StubOpsAdmin, cli: Callable[..., Run]
) -> None:
    mixed.dead.add(1)
    rebuild = ("ops", "map", "rebuild", *FAST, "--topics", "single", "--dead", "1", "--apply")
    refused = cli(*rebuild, "--yes")
    assert refused.code == 1
    assert "different replica counts [1, 2]" in refused.err
    assert "--allow-mixed-replication accepts it" in refused.err, refused.err
    assert not any(call == "alter_reassignments" for call, _ in mixed.calls)
    applied = cli(*rebuild, "--yes", "--allow-mixed-replication")
    assert applied.code == 0, applied.err
    assert all(1 not in r for k, r in mixed.replicas.items() if k[0] == "single")
    assert sorted(len(r) for k, r in mixed.replicas.items() if k[0] == "single") == [1, 1, 2]


@pytest.mark.parametrize(
    ("flags", "both"),
    [
        (("--dead", "2", "--new", "2"), "--dead and --new"),
        (("--dead", "3", "--retire", "3"), "--dead and --retire"),
        (("--new", "4", "--retire", "4"), "--retire and --new"),
    ],
)
def test_a_broker_given_two_states_is_refused(
    flags: tuple[str, ...], both: str, cluster: StubOpsAdmin, cli: Callable[..., Run]
) -> None:
    result = cli("ops", "map", "rebuild", *FAST[:2], "--topics", "orders", *flags)
    assert result.code == 1
    assert result.err.startswith("error: ") and result.err.count("\n") == 1, result.err
    assert both in result.err
    assert result.out == ""


def test_map_apply_on_a_named_cluster_names_it_in_its_messages(
    cluster: StubOpsAdmin, cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ops map ... --apply --cluster C` did not hand the cluster on: the commands its
    messages name used `--bootstrap <address>` instead of `--cluster C`."""
    monkeypatch.setattr("streamplane.cli.ops.resolve_bootstrap", lambda *_args: "stub:9092")
    cluster.reassignment_steps = 1_000_000  # still copying when the timeout comes
    result = cli(
        "ops", "map", "scale", "--new", "4", "--strategy", "count", "--apply", "--yes",
        "--cluster", "prod", "--poll-interval", "0.01", "--timeout", "0.2",
    )  # fmt: skip
    assert result.code != 0
    assert "--cluster prod" in result.err, result.err
    assert "--bootstrap" not in result.err, result.err
