"""`streamplane run`: the main job on the embedded local defaults.

Until the Spark pipeline lands, the job shows the platform end to end on real parts:
the local fleet, a round trip per cluster, the control plane, a stream with lanes,
a producer and a consumer group with per-record acks, poison pills dead-lettered, and
a live failover from local-a to local-b in the middle of the run.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import click

from streamplane.cli.local import data_dir_option, status_table
from streamplane.cli.output import progress, table
from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.producer import StreamProducer
from streamplane.exceptions import StreamplaneError
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetSpec, LocalFleet
from streamplane.local.smoke import round_trip

STREAM = "demo-events"
POISON_EVERY = 100


@click.command("run")
@click.option("--keep", is_flag=True, help="Leave the fleet and the control plane running.")
@click.option("--records", type=int, default=20_000, show_default=True, help="Records to send.")
@click.option("--rate", type=int, default=5_000, show_default=True, help="Records per second.")
@data_dir_option
def run(keep: bool, records: int, rate: int, data_dir: Path) -> None:
    """Fleet up, round trips, a stream with a live failover mid-run, a summary."""
    if records < 100:
        raise click.BadParameter("must be at least 100", param_hint="--records")
    if rate < 1:
        raise click.BadParameter("must be at least 1", param_hint="--rate")
    fleet = LocalFleet(data_dir)
    fleet.down()
    desc = fleet.up(FleetSpec(data_dir=data_dir), progress=progress)
    # A fresh fleet gets a fresh control-plane state (the old one names dead ports).
    shutil.rmtree(data_dir / "control-plane", ignore_errors=True)
    cp = ControlPlaneProcess(data_dir / "control-plane")
    try:
        for cluster in desc.clusters.values():
            progress(f"round trip on {cluster.name}")
            rt = round_trip(cluster.name, cluster.bootstrap)
            click.echo(f"{rt.cluster}: produced {rt.produced}, consumed {rt.consumed} (zstd)")
        progress("starting the control plane")
        cp.start()
        client = cp.client()
        for cluster in desc.clusters.values():
            client.register_cluster(cluster.name, cluster.bootstrap, {"env": "local"})
        client.create_stream(STREAM, "local-a", partitions=6)
        _stream_demo(cp, records, rate)
        click.echo(status_table(fleet.status()))
    finally:
        if keep:
            click.echo(
                f"left running: fleet in {data_dir}, control plane at {cp.url} "
                f"(token in {cp.state_dir / 'token'}); stop with `streamplane local down`"
            )
            (cp.state_dir / "token").write_text(cp.token + "\n")
        else:
            cp.stop()
            fleet.down()
            click.echo("fleet and control plane stopped")


def _stream_demo(cp: ControlPlaneProcess, records: int, rate: int) -> None:
    client = cp.client()
    handled: Counter[int] = Counter()
    clusters: Counter[str] = Counter()
    lock = threading.Lock()

    def handler(msg: StreamMessage) -> None:
        n = int(msg.value or b"-1")
        if n % POISON_EVERY == 0:
            raise ValueError(f"poison pill {n}")
        with lock:
            handled[n] += 1
            clusters[msg.cluster] += 1

    stop = threading.Event()
    consumer = StreamConsumer(STREAM, "demo-indexer", client, max_attempts=3, retry_backoff=0.05)
    worker = threading.Thread(
        target=consumer.run, args=(handler,), kwargs={"concurrency": 4, "stop": stop}, daemon=True
    )
    worker.start()
    progress(
        f"producing {records} records at {rate}/s ({100 // POISON_EVERY}% poison), "
        "failover half-way"
    )
    started = time.monotonic()
    with StreamProducer(STREAM, client) as producer:
        failover_at: float | None = None
        switch_s: float | None = None
        new_epoch = 0
        for i in range(records):
            ahead = started + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            producer.send(str(i).encode(), key=str(i % 64).encode())
            if i == records // 2:
                failover_at = time.monotonic()
                new_epoch = client.failover(STREAM, "local-b", reason="demo: live failover").epoch
            if failover_at is not None and switch_s is None and producer.epoch >= new_epoch:
                switch_s = producer.epoch_switch_times[new_epoch] - failover_at
        producer.flush()
    produced_s = time.monotonic() - started
    poison = len(range(0, records, POISON_EVERY))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with lock:
            done = len(handled) >= records - poison
        if done and consumer.stats["dlq"] >= poison:
            break
        time.sleep(0.2)
    stop.set()
    worker.join(30)
    consumer.close()
    duplicates = sum(c - 1 for c in handled.values() if c > 1)
    missing = records - poison - len(handled)
    click.echo(
        table(
            [
                "stream",
                "produced",
                "handled",
                "duplicates",
                "dead-lettered",
                "missing",
                "on local-a",
                "on local-b",
                "producer switch",
            ],
            [
                [
                    STREAM,
                    records,
                    len(handled),
                    duplicates,
                    consumer.stats["dlq"],
                    missing,
                    clusters["local-a"],
                    clusters["local-b"],
                    "-" if switch_s is None else f"{switch_s * 1000:.0f} ms",
                ]
            ],
        )
    )
    click.echo(f"produced in {produced_s:.1f}s; routing epoch now {client.routing(STREAM).epoch}")
    if missing or consumer.stats["dlq"] != poison:
        raise StreamplaneError(
            f"demo incomplete: {missing} records missing, {consumer.stats['dlq']} of {poison} "
            "poison pills dead-lettered"
        )
