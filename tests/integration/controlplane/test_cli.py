"""`streamplane streams|clusters|groups ...` through the subprocess CLI against the live
control plane."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamplane.kafka.admin import KafkaAdmin
from streamplane.local.control_plane_process import ControlPlaneProcess, free_port
from streamplane.local.fleet import FleetDescriptor, descriptor_path
from tests.waiting import wait_for

CLI = [sys.executable, "-m", "streamplane.cli"]


def run_cli(
    cp: ControlPlaneProcess | None, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPLANE_")}
    if cp is not None:
        env |= {"STREAMPLANE_URL": cp.url, "STREAMPLANE_API_TOKEN": cp.token}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=env, cwd=cwd, check=False, timeout=120
    )


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_help_on_every_command() -> None:
    groups = {
        "control-plane": ["serve"],
        "clusters": ["list", "describe", "add", "update", "remove", "import-local"],
        "streams": ["create", "list", "describe", "delete", "failover", "transition"],
        "groups": ["list", "describe"],
    }
    for group, commands in groups.items():
        for args in ([group, "--help"], *([group, c, "--help"] for c in commands)):
            proc = run_cli(None, *args)
            assert proc.returncode == 0, proc.stderr
            assert "Usage:" in proc.stdout


def test_streams_round_trip(control_plane: ControlPlaneProcess) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    out = ok(
        run_cli(
            control_plane,
            "streams",
            "create",
            name,
            "--cluster",
            "local-a",
            "--lanes",
            "realtime,bulk",
            "--partitions",
            "2",
            "--config",
            "retention.ms=600000",
        )
    )
    assert f"created stream {name} on local-a (epoch 1)" in out
    assert f"sp.{name}.dlq.e1" in out

    other = f"{name}-j"
    created = json.loads(
        ok(run_cli(control_plane, "streams", "create", other, "--cluster", "local-a", "--json"))
    )
    assert created == json.loads(ok(run_cli(control_plane, "streams", "describe", other, "--json")))
    assert created["partitions"] == 6 and created["routing"]["epoch"] == 1
    ok(run_cli(control_plane, "streams", "delete", other))

    listed = json.loads(ok(run_cli(control_plane, "streams", "list", "--json")))
    mine = next(s for s in listed if s["name"] == name)
    assert (mine["epoch"], mine["active_clusters"]) == (1, ["local-a"])
    assert name in ok(run_cli(control_plane, "streams", "list"))

    described = json.loads(ok(run_cli(control_plane, "streams", "describe", name, "--json")))
    assert described["config"] == {"retention.ms": "600000"}
    assert len(described["routing"]["segments"]) == 3
    text = ok(run_cli(control_plane, "streams", "describe", name))
    assert "realtime > bulk > dlq" in text
    assert "message.timestamp.type=LogAppendTime" in text

    moved = json.loads(
        ok(
            run_cli(
                control_plane,
                "streams",
                "failover",
                name,
                "--to",
                "local-b",
                "--lane",
                "bulk",
                "--reason",
                "cli test",
                "--json",
            )
        )
    )
    assert moved["epoch"] == 2

    # Nobody reads the stream: its old bulk segment is sealed, never retired on its own.
    old = f"sp.{name}.bulk.e1"

    def old_state() -> str:
        with control_plane.client() as client:
            return next(s.state.value for s in client.routing(name).segments if s.topic == old)

    wait_for("the old bulk segment sealed", lambda: old_state() == "sealed", 30)
    retired = ok(run_cli(control_plane, "streams", "transition", name, old, "--cluster",
                         "local-a", "--to", "retired"))  # fmt: skip
    assert f"stream {name}: {old} on local-a retired (epoch 4)" in retired
    again = one_error_line(run_cli(control_plane, "streams", "transition", name, old,
                                   "--cluster", "local-a", "--to", "retired"))  # fmt: skip
    assert "cannot go from retired to retired" in again

    assert f"deleted stream {name}" in ok(run_cli(control_plane, "streams", "delete", name))
    err = one_error_line(run_cli(control_plane, "streams", "describe", name))
    assert err == f"error: unknown stream '{name}'"


def test_clusters_commands(control_plane: ControlPlaneProcess, fleet: FleetDescriptor) -> None:
    name = f"c-{uuid.uuid4().hex[:6]}"
    ok(run_cli(control_plane, "clusters", "add", name, "127.0.0.1:1", "--tag", "env=test",
               "--force"))  # fmt: skip
    rows = json.loads(ok(run_cli(control_plane, "clusters", "list", "--tag", "env=test", "--json")))
    assert [r["name"] for r in rows] == [name]
    ok(run_cli(control_plane, "clusters", "update", name, "--tag", "zone=z", "--remove-tag", "env"))
    row = json.loads(ok(run_cli(control_plane, "clusters", "list", "--tag", "zone=z", "--json")))
    assert row[0]["tags"] == {"zone": "z"}
    ok(run_cli(control_plane, "clusters", "remove", name))
    assert name not in ok(run_cli(control_plane, "clusters", "list"))

    # import-local refreshes the registered local clusters from the fleet descriptor
    rows = json.loads(
        ok(
            run_cli(
                control_plane, "clusters", "import-local", "--data-dir", fleet.data_dir, "--json"
            )
        )
    )
    assert {r["name"]: r["bootstrap"] for r in rows} == {
        c.name: c.bootstrap for c in fleet.clusters.values()
    }
    # each shows the Kafka cluster it stands for, as the brokers answer
    doc = json.loads(ok(run_cli(control_plane, "clusters", "describe", "local-a", "--json")))
    assert doc["kafka_cluster_id"] == fleet.cluster("local-a").cluster_id
    listed = ok(run_cli(control_plane, "clusters", "list"))
    assert fleet.cluster("local-b").cluster_id in listed


def test_import_local_does_not_repoint_a_cluster_with_segments(
    fleet: FleetDescriptor, tmp_path: Path
) -> None:
    """A descriptor naming another Kafka cluster local-a (local-b's brokers, as a new
    fleet would be) does not move local-a while a stream has segments there, unless
    --force. Its own control plane: a wrong move must not reach the session's. (local-b
    is not registered there: local-a would be refused as a Kafka cluster registered
    under another name, ``test_import_local_does_not_give_a_kafka_cluster_two_names``.)"""
    a, b = fleet.cluster("local-a"), fleet.cluster("local-b")
    elsewhere = tmp_path / "new-fleet"
    elsewhere.mkdir()
    clusters = {**fleet.clusters, "local-a": b.model_copy(update={"name": "local-a"})}
    fleet.model_copy(update={"clusters": clusters}).save(descriptor_path(elsewhere))
    cp = ControlPlaneProcess(tmp_path / "cp", extra_args=["--no-health"])
    cp.start()
    stream = f"imp-{uuid.uuid4().hex[:8]}"
    topics: set[str] = set()
    try:
        with cp.client() as client:
            client.register_cluster(a.name, a.bootstrap, {"env": "local"})
            topics |= {s.topic for s in client.create_stream(stream, "local-a").segments}
            refused = run_cli(cp, "clusters", "import-local", "--data-dir", str(elsewhere))
            assert refused.returncode == 1
            assert refused.stderr.splitlines() == [
                f"refused: cluster 'local-a' not re-pointed from {a.bootstrap} to "
                f"{b.bootstrap}: {b.bootstrap} is another Kafka cluster (id {b.cluster_id}; "
                f"registered: {a.cluster_id}), and the registry holds segments of streams "
                f"{stream} there; to re-point it anyway: `streamplane clusters update "
                f"local-a --bootstrap {b.bootstrap} --force` (or `clusters import-local "
                "--force`)",
                "error: 1 local cluster refused (see above); the others were imported",
            ]
            assert client.get_cluster("local-a")["kafka_cluster_id"] == a.cluster_id
            ok(run_cli(cp, "clusters", "import-local", "--data-dir", str(elsewhere), "--force"))
            moved = client.get_cluster("local-a")
            assert (moved["bootstrap"], moved["kafka_cluster_id"]) == (b.bootstrap, b.cluster_id)
            client.delete_stream(stream, delete_topics=False)  # they are on a's brokers
    finally:
        cp.stop()
        KafkaAdmin(a.bootstrap).delete_topics(sorted(topics))


def test_import_local_does_not_give_a_kafka_cluster_two_names(
    fleet: FleetDescriptor, tmp_path: Path
) -> None:
    """A descriptor naming local-a's Kafka cluster (its brokers, its cluster id) local-x
    too: local-x is refused, naming local-a, and the others are imported (it used to be
    registered, forced, so unchecked: two names for one Kafka cluster); --force
    registers it all the same."""
    a = fleet.cluster("local-a")
    elsewhere = tmp_path / "fleet"
    elsewhere.mkdir()
    clusters = {**fleet.clusters, "local-x": a.model_copy(update={"name": "local-x"})}
    fleet.model_copy(update={"clusters": clusters}).save(descriptor_path(elsewhere))
    cp = ControlPlaneProcess(tmp_path / "cp", extra_args=["--no-health"])
    cp.start()
    try:
        with cp.client() as client:
            client.register_cluster(a.name, a.bootstrap, {"env": "local"})
            refused = run_cli(cp, "clusters", "import-local", "--data-dir", str(elsewhere))
            assert refused.returncode == 1
            assert refused.stderr.splitlines() == [
                f"refused: cluster 'local-x' not imported: {a.bootstrap} is Kafka cluster "
                f"{a.cluster_id}, already registered as 'local-a' ({a.bootstrap}): one name "
                "per Kafka cluster; to import it as 'local-x': `streamplane clusters remove "
                "local-a` first; to give it both names: `streamplane clusters add local-x "
                f"{a.bootstrap} --force` (or `clusters import-local --force`)",
                "error: 1 local cluster refused (see above); the others were imported",
            ]
            assert sorted(c["name"] for c in client.list_clusters()) == ["local-a", "local-b"]
            ok(run_cli(cp, "clusters", "import-local", "--data-dir", str(elsewhere), "--force"))
            assert client.get_cluster("local-x")["kafka_cluster_id"] == a.cluster_id
    finally:
        cp.stop()


def test_groups_commands(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    stream = stream_factory("local-a", partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    stop = threading.Event()
    units: list[int] = []

    def member() -> None:  # heartbeats well within its lease while the commands run
        held: list[dict[str, Any]] = []  # claimed, as a consumer does
        with control_plane.client() as client:
            while not stop.is_set():
                answer = client.group_heartbeat(
                    group, "m1", stream, ["realtime", "bulk"], cpu=0.2, records_per_s=50.0,
                    claims=held,
                )  # fmt: skip
                held = answer["work_units"]
                units.append(len(held))
                stop.wait(0.3)

    beating = threading.Thread(target=member, daemon=True)
    beating.start()
    try:
        # past the Assigner's recovery window (it answers claims then): all 4 units
        wait_for("m1 holds every unit", lambda: units and units[-1] == 4, timeout=30)
        rows = json.loads(ok(run_cli(control_plane, "groups", "list", "--json")))
        [mine] = [r for r in rows if r["group"] == group]
        assert (mine["stream"], mine["members"], mine["units"], mine["unowned"]) == (
            stream, 1, 4, 0,
        )  # fmt: skip
        out = ok(run_cli(control_plane, "groups", "describe", group))
        [m1] = [line.split() for line in out.splitlines() if line.startswith("m1 ")]
        assert m1[1:3] == ["20%", "50.0"] and m1[4:6] == ["4", "0"]
        assert f"sp.{stream}.realtime.e1 0-1" in out
    finally:
        stop.set()
        beating.join(10)
    err = one_error_line(run_cli(control_plane, "groups", "describe", f"{group}-x"))
    assert err.startswith(f"error: unknown group '{group}-x': no member of it has heartbeated")


def test_cli_errors_are_one_line(control_plane: ControlPlaneProcess, tmp_path: Path) -> None:
    err = one_error_line(
        run_cli(control_plane, "streams", "create", "Bad_Name", "--cluster", "local-a")
    )
    assert "invalid stream name 'Bad_Name'" in err
    err = one_error_line(
        run_cli(control_plane, "streams", "create", "fine", "--cluster", "nowhere")
    )
    assert "unknown cluster 'nowhere'" in err
    # no token anywhere (env cleared, no .streamplane/api-token in cwd)
    env_less = subprocess.run(
        [*CLI, "clusters", "remove", "local-a", "--url", control_plane.url],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("STREAMPLANE_")},
    )
    assert "missing API token" in one_error_line(env_less)
    unreachable = f"http://127.0.0.1:{free_port()}"
    err = one_error_line(run_cli(None, "streams", "list", "--url", unreachable))
    assert err.startswith(f"error: control plane at {unreachable} is unreachable")


def test_serve_errors(control_plane: ControlPlaneProcess, tmp_path: Path) -> None:
    taken = one_error_line(
        run_cli(
            None,
            "control-plane",
            "serve",
            "--port",
            str(control_plane.port),
            "--token",
            "long-enough-token",
            "--db",
            f"sqlite:///{tmp_path}/x.db",
            cwd=tmp_path,
        )
    )
    assert taken == f"error: port {control_plane.port} on 127.0.0.1 is already in use"
    bad_db = one_error_line(
        run_cli(
            None,
            "control-plane",
            "serve",
            "--db",
            "nosuchdb://x",
            "--port",
            "0",
            "--token",
            "long-enough-token",
            cwd=tmp_path,
        )
    )
    assert "driver not installed" in bad_db


def test_serve_writes_a_token_file_and_imports_the_local_fleet(
    fleet: FleetDescriptor, tmp_path: Path
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPLANE_")}
    proc = subprocess.Popen(
        [
            *CLI,
            "control-plane",
            "serve",
            "--port",
            str(port),
            "--data-dir",
            fleet.data_dir,
            "--log-level",
            "warning",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith(f"control plane on http://127.0.0.1:{port}")
        token_file = tmp_path / ".streamplane" / "api-token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        # a CLI run from the same directory finds the token file by itself
        listed = subprocess.run(
            [*CLI, "clusters", "list", "--json", "--url", f"http://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            check=False,
            timeout=60,
        )
        rows = json.loads(ok(listed))
        assert {r["name"] for r in rows} == set(fleet.clusters)
        assert all(r["tags"] == {"env": "local"} for r in rows)
        url = f"http://127.0.0.1:{port}"
        added = subprocess.run(  # the token file is found (nothing answers there: forced)
            [*CLI, "clusters", "add", "extra", "127.0.0.1:2", "--force", "--url", url],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            check=False,
            timeout=60,
        )
        ok(added)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert (tmp_path / ".streamplane" / "control-plane.db").is_file()


def test_dlq_list_past_the_in_flight_window_and_replay(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    """`dlq list --limit` lists every dead letter, past the consumer's in-flight window
    (10,000: it stopped there), and `dlq replay` sends each back to its lane once."""
    from confluent_kafka import Producer

    from streamplane.kafka.clients import producer_config

    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    with control_plane.client() as client:
        dlq_topic = client.routing(stream).active("dlq").topic
    total = 10_050
    producer = Producer(producer_config(fleet.bootstrap("local-a")))
    for i in range(total):
        headers: list[tuple[str, str | bytes | None]] = [
            ("sp-dlq-lane", b"realtime"),
            ("sp-dlq-offset", b"%d" % i),
        ]
        producer.produce(dlq_topic, b"%d" % i, headers=headers)
    assert producer.flush(60) == 0

    listing = json.loads(ok(run_cli(control_plane, "dlq", "list", stream, "--limit", "20000",
                                    "--json")))  # fmt: skip
    assert len(listing) == total
    assert listing[7]["provenance"] == {"lane": "realtime", "offset": 7}  # a number
    # The limit reached, with more after it: said so (it read "1 record" as if that was all).
    first = ok(run_cli(control_plane, "dlq", "list", stream, "--limit", "1"))
    assert first.endswith("the first 1 record: more follow (--limit N shows more)\n")
    every = ok(run_cli(control_plane, "dlq", "list", stream, "--limit", str(total)))
    assert every.endswith(f"{total} records\n")
    replayed = ok(run_cli(control_plane, "dlq", "replay", stream))
    assert replayed.strip() == f"replayed {total} records"
    again = ok(run_cli(control_plane, "dlq", "replay", stream))
    assert again.strip() == "replayed 0 records"


def test_dlq_replay_leaves_the_dead_letters_that_arrive_while_it_runs(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    """Dead letters keep arriving (one every 10 ms) while `dlq replay` runs: it replays
    those present when it started, says how many newer ones it left, and ends. The next
    replay (nothing arriving any more) replays exactly those. (Before, it read on until
    the lane had been quiet for 2 s: never, while a group failed what it sent back.)"""
    import re
    import time

    from confluent_kafka import Producer

    from streamplane.client.consumer import StreamConsumer
    from streamplane.kafka.clients import producer_config
    from tests.waiting import wait_for

    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    with control_plane.client() as client:
        dlq_topic = client.routing(stream).active("dlq").topic
        # (a control plane just started hands a new member nothing for ~2.5 s)
        with StreamConsumer(stream, f"probe-{uuid.uuid4().hex[:8]}", client, lanes=["dlq"]) as c:
            wait_for(
                "the Assigner to hand partitions out", lambda: c.poll(0.1) or c.assignment(), 30
            )
    producer = Producer(producer_config(fleet.bootstrap("local-a")))
    written = 0

    def write(n: int) -> None:
        nonlocal written
        for _ in range(n):
            producer.produce(dlq_topic, b"%d" % written, headers=[("sp-dlq-lane", b"realtime")])
            written += 1
        assert producer.flush(30) == 0

    write(1000)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPLANE_")}
    env |= {"STREAMPLANE_URL": control_plane.url, "STREAMPLANE_API_TOKEN": control_plane.token}
    proc = subprocess.Popen(
        [*CLI, "dlq", "replay", stream],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        write(1)
        time.sleep(0.01)
    finished = proc.poll() is not None
    if not finished:
        proc.kill()
    out, err = proc.communicate(timeout=60)
    assert finished, f"`dlq replay` still running after 60 s, {written} dead letters written"
    assert proc.returncode == 0, err
    m = re.fullmatch(
        r"replayed (\d+) records; (\d+) newer dead letters? left for the next replay", out.strip()
    )
    assert m is not None, out
    first, newer = int(m[1]), int(m[2])
    assert first >= 1000
    assert 1 <= newer <= written - first
    rest = ok(run_cli(control_plane, "dlq", "replay", stream))
    assert rest.strip() == f"replayed {written - first} records"


def test_lag_of_an_unknown_stream_says_so(control_plane: ControlPlaneProcess) -> None:
    line = one_error_line(run_cli(control_plane, "lag", "--stream", "no-such-stream"))
    assert "unknown stream 'no-such-stream'" in line


def test_dlq_commands_with_a_wrong_token(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    """`dlq list` reads only: a wrong token is never used (no heartbeat warning);
    `dlq replay` writes: a wrong token is one error line, before anything is written."""
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    listed = run_cli(control_plane, "dlq", "list", stream, "--token", "wrong")
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == ""
    assert listed.stdout.endswith("0 records\n")
    line = one_error_line(run_cli(control_plane, "dlq", "replay", stream, "--token", "wrong"))
    assert "wrong API token" in line
