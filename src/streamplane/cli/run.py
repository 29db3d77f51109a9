"""`streamplane run`: the main job on the embedded local defaults.

The job shows the platform end to end on real parts: the local fleet, a round trip per
cluster, the control plane, then (``--job pipeline``, the default) the stream
``telemetry`` fed by the telemetry generator (0.5% poison pills, 0.2% sent twice) and
read by the Spark telemetry job into the Delta event store, with a live failover from
local-a to local-b half-way; the summary counts events produced, stored, duplicates
dropped, dead-lettered, the group's maximum time lag (from the control plane's lag
monitor) and how long the producer took to switch. ``--job client`` runs the earlier
demo instead: a consumer group with per-record acks on the stream ``demo-events``.
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
TELEMETRY_STREAM = "telemetry"
TELEMETRY_GROUP = "telemetry-job"


@click.command("run")
@click.option("--keep", is_flag=True, help="Leave the fleet and the control plane running.")
@click.option("--records", type=int, default=20_000, show_default=True, help="Records to send.")
@click.option("--rate", type=int, default=5_000, show_default=True, help="Records per second.")
@click.option(
    "--job",
    type=click.Choice(["pipeline", "client"]),
    default="pipeline",
    show_default=True,
    help="The Spark telemetry pipeline, or the client-library demo.",
)
@data_dir_option
def run(keep: bool, records: int, rate: int, job: str, data_dir: Path) -> None:
    """Fleet up, round trips, a stream with a live failover mid-run, a summary."""
    if records < 100:
        raise click.BadParameter("must be at least 100", param_hint="--records")
    if rate < 1:
        raise click.BadParameter("must be at least 1", param_hint="--rate")
    fleet = LocalFleet(data_dir)
    # A fresh fleet each run: a plain ``down`` keeps the data, and ``up`` would restart
    # the last run's fleet with its demo topics.
    fleet.down(purge=True)
    desc = fleet.up(FleetSpec(data_dir=data_dir), progress=progress)
    # A fresh fleet gets a fresh control-plane state (the old one names dead ports).
    shutil.rmtree(data_dir / "control-plane", ignore_errors=True)
    # Started again if it exits on its own (a native library's abort) while the job runs.
    cp = ControlPlaneProcess(data_dir / "control-plane", restart_on_exit=True)
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
        if job == "pipeline":
            _pipeline_demo(cp, data_dir, records, rate)
        else:
            client.create_stream(STREAM, "local-a", partitions=6)
            _stream_demo(cp, records, rate)
        click.echo(status_table(fleet.status()))
    finally:
        if keep:
            token_file = cp.state_dir / "token"
            click.echo(
                f"left running: fleet in {data_dir}, control plane at {cp.url} (pid {cp.pid}, "
                f"token in {token_file}): point commands at it with `--url {cp.url} --token "
                f'"$(cat {token_file})"`; stop both with `kill {cp.pid}; streamplane local '
                f"down --data-dir {data_dir}`"
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
            if failover_at is not None and switch_s is None:
                switched = producer.switched_at(new_epoch)
                if switched is not None:
                    switch_s = switched - failover_at
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


def _pipeline_demo(cp: ControlPlaneProcess, data_dir: Path, records: int, rate: int) -> None:
    """Generator -> stream (failover half-way) -> Spark telemetry job -> Delta tables."""
    from streamplane.pipeline.generator import generate, produce
    from streamplane.pipeline.spark import build_session
    from streamplane.pipeline.telemetry import TelemetryConfig, TelemetryJob, store_summary

    client = cp.client()
    client.create_stream(TELEMETRY_STREAM, "local-a", partitions=3)
    warehouse = data_dir / "warehouse"
    shutil.rmtree(warehouse, ignore_errors=True)
    config = TelemetryConfig(
        stream=TELEMETRY_STREAM,
        group=TELEMETRY_GROUP,
        warehouse=warehouse,
        checkpoint=warehouse / "_checkpoints" / TELEMETRY_STREAM,
        control_plane=cp.url,
        token=cp.token,
        trigger_seconds=2.0,
    )
    progress("starting Spark (local[2]) and the telemetry job")
    spark = build_session("streamplane-run", master="local[2]")
    job = TelemetryJob(spark, config)
    query = job.start()
    lag = _LagSampler(cp, TELEMETRY_STREAM, TELEMETRY_GROUP)
    lag.start()
    try:
        generated = list(generate(records, seed=7, poison_ratio=0.005, rate=rate))
        half = records // 2
        progress(
            f"producing {records} telemetry events at {rate}/s (0.5% poison, 0.2% duplicates), "
            "failover to local-b half-way"
        )
        started = time.monotonic()
        with StreamProducer(TELEMETRY_STREAM, client) as producer:
            first = produce(producer, iter(generated[:half]), rate=rate, duplicate_ratio=0.002)
            failover_at = time.monotonic()
            epoch = client.failover(TELEMETRY_STREAM, "local-b", reason="run: live failover").epoch
            second = produce(
                producer, iter(generated[half:]), rate=rate, duplicate_ratio=0.002, seed=8
            )
            switched = producer.switched_at(epoch)
        produced_s = time.monotonic() - started
        progress("waiting for the telemetry job to store everything")
        query.processAllAvailable()
        summary = store_summary(spark, warehouse)
    finally:
        lag.stop()
        job.stop(query, reason="the run is over", say=progress)  # between micro-batches
        job.close()
        spark.stop()
    produced = first.produced + second.produced
    valid = first.valid + second.valid
    poison = len(first.poison_keys) + len(second.poison_keys)
    missing = valid - summary["stored"]
    click.echo(
        table(
            [
                "stream",
                "produced",
                "valid",
                "stored",
                "duplicates dropped",
                "dead-lettered",
                "missing",
                "max time lag",
                "failover",
                "stored p50/p99",
            ],
            [
                [
                    TELEMETRY_STREAM,
                    produced,
                    valid,
                    summary["stored"],
                    summary["duplicates_dropped"],
                    summary["dead_letters"],
                    missing,
                    "-" if lag.max_s is None else f"{lag.max_s:.1f} s",
                    "-" if switched is None else f"{(switched - failover_at) * 1000:.0f} ms",
                    f"{summary['store_latency_p50_ms'] / 1000:.1f} s / "
                    f"{summary['store_latency_p99_ms'] / 1000:.1f} s",
                ]
            ],
        )
    )
    click.echo(
        f"produced in {produced_s:.1f}s; {summary['batches']} micro-batches; "
        f"Delta tables in {warehouse}; routing epoch now {client.routing(TELEMETRY_STREAM).epoch}"
    )
    if missing or summary["dead_letters"] != poison or summary["distinct_ids"] != valid:
        raise StreamplaneError(
            f"pipeline incomplete: {missing} events missing, {summary['dead_letters']} of "
            f"{poison} poison pills dead-lettered"
        )


class _LagSampler(threading.Thread):
    """Samples the group's time lag from the control plane's lag monitor every second."""

    def __init__(self, cp: ControlPlaneProcess, stream: str, group: str) -> None:
        super().__init__(daemon=True)
        self._cp = cp
        self._stream = stream
        self._group = group
        self._stop_event = threading.Event()
        self.max_s: float | None = None

    def run(self) -> None:
        with self._cp.client(timeout=5.0) as client:
            while not self._stop_event.wait(1.0):
                try:
                    groups = client.lag(group=self._group, stream=self._stream)["groups"]
                except StreamplaneError:  # restarting: the next sample will tell
                    continue
                for g in groups:
                    value = g.get("max_time_lag_s")
                    if g.get("group") == self._group and value is not None:
                        self.max_s = max(self.max_s or 0.0, float(value))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)
