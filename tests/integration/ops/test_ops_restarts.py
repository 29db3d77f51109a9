"""The SRE's exploratory findings on the real rack cluster: a long-lived admin client
across a broker restart, and an apply whose reassignment is cancelled from another
shell."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from streamplane.core.throttle import LEADER_RATE
from streamplane.exceptions import KafkaError
from streamplane.local.fleet import ClusterInfo, LocalFleet
from streamplane.ops.autothrottle import describe_throttles
from streamplane.ops.kafka_ops import ConfigChange, KafkaOpsAdmin
from tests.integration.ops.conftest import cli, cli_popen, produce
from tests.waiting import wait_for


def test_a_long_lived_admin_reaches_a_broker_back_from_a_restart(
    rack_cluster: ClusterInfo, rack_local_fleet: LocalFleet
) -> None:
    """kafka-python drops a dead broker from the client's metadata and reads it again
    only every 5 minutes: the old adapter failed with UnknownBrokerIdError for minutes
    after the broker was back."""
    admin = KafkaOpsAdmin(rack_cluster.bootstrap, retry_s=2)
    try:
        admin.alter_configs([ConfigChange("broker", "3", {LEADER_RATE: "5000000"})])
        rack_local_fleet.kill_broker("racked", 3)
        try:

            def forgotten() -> bool:
                try:
                    admin.describe_configs("broker", ["3"])
                except KafkaError as exc:
                    return "UnknownBrokerIdError" in str(exc)
                return False

            wait_for("the client's metadata to drop broker 3", forgotten, 90, every=1)
        finally:
            rack_local_fleet.start_broker("racked", 3)
        wait_for("broker 3 listed again", lambda: 3 in admin.brokers(), 60, every=0.5)
        started = time.monotonic()
        change = ConfigChange("broker", "3", delete=(LEADER_RATE,))
        assert admin.alter_configs([change]) == {("broker", "3"): None}
        wait_for(  # the broker applies it when the controller's record reaches it
            "the throttle gone from broker 3",
            lambda: LEADER_RATE not in admin.describe_configs("broker", ["3"])["3"],
            10,
            every=0.2,
        )
        print(f"\nbroker 3 reached again {time.monotonic() - started:.1f}s after it was listed")
    finally:
        admin.close()


def test_an_apply_whose_copy_is_cancelled_from_another_shell_ends_with_an_error(
    racked4: ClusterInfo,
    ops_admin: KafkaOpsAdmin,
    placed_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The old apply waited forever (no --timeout): the partition was neither listed as
    running nor at its target."""
    topic = placed_topic({0: [2]})
    produce(racked4.bootstrap, topic, 0, 4)
    plan, state = tmp_path / "plan.json", tmp_path / "state.json"
    doc = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3]}]}
    plan.write_text(json.dumps(doc))
    log = tmp_path / "apply.log"
    applying = cli_popen(
        "ops", "apply", str(plan), "--bootstrap", racked4.bootstrap, "--autothrottle", "1MB",
        "--min-rate", "300KB", "--max-rate", "300KB", "--state-file", str(state),
        "--poll-interval", "0.5", "--yes", log=log,
    )  # fmt: skip
    try:
        wait_for("the copy running", lambda: ops_admin.list_reassignments() != {}, 30, every=0.25)
        cancelled = cli("ops", "apply", "--cancel", "--bootstrap", racked4.bootstrap, "--yes")
        assert cancelled.returncode == 0, cancelled.stderr
        assert applying.wait(60) == 1, log.read_text()
    finally:
        if applying.poll() is None:
            applying.kill()
    error = log.read_text().strip().splitlines()[-1]
    assert error.startswith(f"error: {topic}-0: no longer being reassigned"), error
    assert "cancelled by someone else" in error and "1 cancelled elsewhere" in error, error
    assert error.endswith("throttles removed"), error
    assert describe_throttles(ops_admin, [topic]) == {}
    assert not state.exists()
    assert ops_admin.partitions({topic})[(topic, 0)].replicas == (2,)
