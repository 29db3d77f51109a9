"""End to end: generator -> stream (failover mid-run) -> Spark telemetry job (driver
restart from its checkpoint) -> Delta event store; checked against the ground truth.

200,000 events (0.5% malformed, 0.2% of the valid ones sent twice), produced in two
halves without pacing (the generator's event times are spaced for 4,000 events/s);
the job reads at most 50,000 records per micro-batch. The driver restart comes after
the first stored batch, the failover to local-b before the second half is produced.
Then the CLI (``generate`` and ``pipeline telemetry``) through a deleted checkpoint.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamplane.client.dlq import list_dead_letters
from streamplane.client.producer import StreamProducer
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.pipeline.events import reference_rollups
from streamplane.pipeline.generator import GroundTruth, generate, produce
from streamplane.pipeline.telemetry import TelemetryJob, rollup_views
from tests.integration.pipeline.conftest import telemetry_config
from tests.waiting import wait_for

EVENTS = 200_000
RATE = 4_000  # event-time spacing of the generated events
PRODUCE_RATE = 1e9  # as fast as the producer goes
MAX_PER_TRIGGER = 50_000

pytestmark = pytest.mark.timeout(1200)


def test_telemetry_end_to_end(
    spark: Any,
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    stream = stream_factory("local-a", partitions=3)
    config = telemetry_config(
        control_plane,
        stream,
        "telemetry-e2e",
        tmp_path,
        trigger_seconds=2.0,
        max_records_per_trigger=MAX_PER_TRIGGER,
    )
    records = list(generate(EVENTS, seed=11, poison_ratio=0.005, rate=RATE))
    half = EVENTS // 2
    job = TelemetryJob(spark, config)
    query = job.start()
    client = control_plane.client()
    try:
        with StreamProducer(stream, client) as producer:
            first = produce(
                producer, iter(records[:half]), rate=PRODUCE_RATE, duplicate_ratio=0.002
            )
            # Driver restart from the checkpoint, possibly in the middle of a batch.
            wait_for(
                "the first stored micro-batch", lambda: job.stats["batches"] >= 1, 300, every=0.5
            )
            query.stop()
            job.close()
            job = TelemetryJob(spark, config)
            query = job.start()
            # Live failover while the job runs; the producer follows the routing.
            client.failover(stream, "local-b", reason="e2e")
            second = produce(
                producer, iter(records[half:]), rate=PRODUCE_RATE, duplicate_ratio=0.002
            )
        query.processAllAvailable()
    finally:
        query.stop()
        job.close()

    truth = GroundTruth()
    for part in (first, second):
        truth.events.extend(part.events)
        truth.poison_keys.extend(part.poison_keys)
    valid_ids = {e.event_id for e in truth.events}
    assert len(valid_ids) == len(truth.events) > 0.99 * EVENTS
    assert 0.004 * EVENTS <= len(truth.poison_keys) <= 0.006 * EVENTS

    events = spark.read.format("delta").load(config.table("events"))
    stored = {r["event_id"] for r in events.select("event_id").collect()}
    assert events.count() == len(stored) == len(valid_ids)  # each valid event exactly once
    assert stored == valid_ids
    assert {r[0] for r in events.select("cluster").distinct().collect()} == {"local-a", "local-b"}
    assert events.where("team is null or team = 'unknown'").count() == 0  # enriched

    dead = spark.read.format("delta").load(config.table("dead_letters"))
    assert {bytes(r["key"]).decode() for r in dead.select("key").collect()} == set(
        truth.poison_keys
    )
    in_lane = list_dead_letters(client, stream, limit=10 * EVENTS, idle_s=3.0).letters
    assert {(d.key or b"").decode() for d in in_lane} == set(truth.poison_keys)
    assert all(d.provenance.get("error") for d in in_lane)

    ref = reference_rollups(truth.events)
    views = rollup_views(spark, config.warehouse)
    logs = {
        (_ms(r["minute"]), r["service"], r["level"]): r["count"]
        for r in views["log_counts"].collect()
    }
    assert logs == ref.log_counts
    metrics = {
        (_ms(r["minute"]), r["service"], r["name"]): (r["count"], r["sum"], r["min"], r["max"])
        for r in views["metric_rollups"].collect()
    }
    assert metrics.keys() == ref.metrics.keys()
    for key, (count, total, low, high) in ref.metrics.items():
        got = metrics[key]
        assert got[0] == count and (got[2], got[3]) == (low, high)
        assert math.isclose(got[1], total, rel_tol=1e-9)
    spans = {
        (_ms(r["minute"]), r["service"]): (r["count"], r["errors"], r["p50"], r["p95"], r["p99"])
        for r in views["span_latency"].collect()
    }
    assert spans.keys() == ref.spans.keys()
    for span_key, expected in ref.spans.items():
        assert spans[span_key][:2] == expected[:2]
        assert spans[span_key][2:] == pytest.approx(expected[2:], rel=1e-9)

    batches = spark.read.format("delta").load(config.table("batches"))
    # A batch whose MERGE was committed when the driver stopped is recorded by the restarted
    # one with nothing inserted (Delta skipped its MERGE): at most one batch is missing.
    inserted = batches.groupBy().sum("inserted").first()[0]
    assert len(valid_ids) - MAX_PER_TRIGGER <= inserted <= len(valid_ids)
    client.close()


def _ms(ts: Any) -> int:
    return int(ts.timestamp() * 1000)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "streamplane.cli", *args],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _summary(stdout: str) -> dict[str, str]:
    header, _, values = stdout.strip().splitlines()[-3:]
    return dict(zip(header.split(), values.split(), strict=True))


def test_the_cli_job_after_its_checkpoint_is_deleted(
    spark: Any,
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The tester's session: generate (default seed), run the job, delete its
    checkpoint, generate again, run again. The second run's events were neither stored
    (skipped as the old query's batches) nor, with a fixed default seed, new."""
    stream = stream_factory("local-a", partitions=1)
    warehouse = tmp_path / "W"
    connection = ("--url", control_plane.url, "--token", control_plane.token)
    job = ("pipeline", "telemetry", "--stream", stream, "--group", "tj3",
           "--warehouse", str(warehouse), "--available-now", *connection)  # fmt: skip
    truths = []
    for run in (1, 2):
        path = tmp_path / f"truth-{run}.json"
        _cli("generate", "--stream", stream, "--rate", "2000", "--duration", "0.5",
             "--poison-ratio", "0.05", "--summary", str(path), *connection)  # fmt: skip
        truths.append(json.loads(path.read_text()))
        proc = _cli(*job)
        batch_lines = [line for line in proc.stderr.splitlines() if line.startswith("… batch ")]
        assert len(batch_lines) == 1, proc.stderr[-3000:]
        assert batch_lines[0].startswith("… batch 0: 1,000 records, "), batch_lines
        shutil.rmtree(warehouse / "_checkpoints")
    assert truths[0]["seed"] != truths[1]["seed"]
    summary = _summary(proc.stdout)
    valid = sum(t["valid_events"] for t in truths)
    poison = sum(t["poison"] for t in truths)
    assert (int(summary["stored"]), int(summary["dead_letters"])) == (valid, poison)
    assert summary["duplicates_dropped"] == summary["replayed"] == "0"
    assert int(summary["batches"]) == 2
    dead = spark.read.format("delta").load(str(warehouse / "dead_letters"))
    keys = {bytes(r["key"]).decode() for r in dead.select("key").collect()}
    assert keys == {k for t in truths for k in t["poison_keys"]}
