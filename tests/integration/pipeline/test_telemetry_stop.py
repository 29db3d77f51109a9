"""`streamplane pipeline telemetry` stopped in the middle of a micro-batch (CLI, real Spark).

Before, the stop cancelled the running batch: Spark's stream thread died on a
``java.lang.StackOverflowError`` (~1,000 lines of Java trace on stderr) and the job
exited 0 with nothing of the batch stored. Now a stop lets the batch finish (within
``--stop-grace``), and a batch cut short (``--stop-grace 0``) is one line, done again at
the next start.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamplane.client.producer import StreamProducer
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.pipeline.generator import GroundTruth, generate, produce
from tests.waiting import wait_for

EVENTS = 2_000
RUNNING = "telemetry job running on"
# What a stop in the middle of a batch used to print (Spark's and Python's traces).
NOISE = re.compile(r"Exception|Error|Traceback|^\s+at |TaskKilled|Failed to cancel|WARN|ERROR")
# Spark's, at the summary's first query of the events table (26 columns): not the stop's.
PLAN_WARNING = "WARN SparkStringUtils: Truncated the string representation of a plan"

pytestmark = pytest.mark.timeout(900)


def _produce(control_plane: ControlPlaneProcess, stream: str, seed: int) -> GroundTruth:
    client = control_plane.client()
    try:
        with StreamProducer(stream, client) as producer:
            records = generate(EVENTS, seed=seed, poison_ratio=0.01, rate=1000)
            return produce(producer, records, rate=1e9, seed=seed)
    finally:
        client.close()


class Job:
    """One `pipeline telemetry` process, its stdout and stderr in files."""

    def __init__(self, args: list[str], out: Path) -> None:
        self.stdout, self.stderr = out.with_suffix(".out"), out.with_suffix(".err")
        with self.stdout.open("w") as o, self.stderr.open("w") as e:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamplane.cli", "pipeline", "telemetry", *args],
                stdout=o, stderr=e, text=True,
            )  # fmt: skip

    def err(self) -> str:
        return self.stderr.read_text()

    def wait_for(self, what: str, probe: Callable[[], Any], timeout: float = 300) -> None:
        def check() -> Any:
            assert self.proc.poll() is None, f"the job ended:\n{self.err()[-3000:]}"
            return probe()

        wait_for(what, check, timeout, every=0.05)

    def end(self) -> tuple[list[str], dict[str, str]]:
        """Wait for the exit (0); the stderr lines after the start, the summary."""
        assert self.proc.wait(timeout=300) == 0, self.err()[-3000:]
        lines = self.err().splitlines()
        after = lines[next(i for i, line in enumerate(lines) if RUNNING in line) + 1 :]
        header, _, values = self.stdout.read_text().strip().splitlines()[-3:]
        after = [line for line in after if PLAN_WARNING not in line]
        return _without_heartbeater_race(after), dict(
            zip(header.split(), values.split(), strict=True)
        )


def _without_heartbeater_race(lines: list[str]) -> list[str]:
    """``lines`` without Spark's executor-heartbeater race, whatever the job does: its
    heartbeat reads a running task's accumulators while the task sets them up, and now
    and then logs an NPE with its trace (``ERROR Utils: Uncaught exception in thread
    executor-heartbeater``; the next heartbeat goes on). It came once, during batch 0
    before the Ctrl-C, in a clean-clone run; it is Spark's line, not a stop's."""
    out: list[str] = []
    in_race = False
    for line in lines:
        if "Uncaught exception in thread executor-heartbeater" in line:
            in_race = True
            continue
        if in_race and (
            line.startswith(("\tat ", "\t... ", "java.", "Caused by")) or not line.strip()
        ):
            continue
        in_race = False
        out.append(line)
    return out


def test_a_stop_in_the_middle_of_a_micro_batch(
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    stream = stream_factory("local-a", partitions=1)
    warehouse = tmp_path / "W"
    checkpoint = warehouse / "_checkpoints" / stream
    args = ["--stream", stream, "--group", "stop-test", "--warehouse", str(warehouse),
            "--url", control_plane.url, "--token", control_plane.token]  # fmt: skip
    first = _produce(control_plane, stream, seed=1)

    # 1. Ctrl-C once batch 0 has stored its events: its dead letters, rollups and
    # record are still to do. The batch finishes, then the query stops.
    job = Job(args, tmp_path / "run1")
    merged = warehouse / "events" / "_delta_log" / f"{1:020d}.json"
    job.wait_for("batch 0's MERGE", merged.exists)
    job.proc.send_signal(signal.SIGINT)
    after, summary = job.end()
    after = [line for line in after if not line.startswith("… still waiting for batch 0: ")]
    assert after[0].startswith("… Ctrl-C received: batch 0 is running ("), after
    assert after[0].endswith("letting it finish, for up to 60s"), after
    assert after[1].startswith(f"… batch 0: {EVENTS:,} records, {first.valid:,} stored, "), after
    assert after[-1] == (
        f"… this run: 1 micro-batch, {EVENTS:,} records, {first.valid:,} stored, "
        f"{len(first.poison_keys):,} dead letters sent; the event store, every run:"
    ), after
    assert not [line for line in after if NOISE.search(line)], after
    assert (int(summary["stored"]), int(summary["batches"])) == (first.valid, 1)

    # 2. No grace period: SIGTERM in batch 1 (its events take 20 s and more to be stored
    # on a cold driver) cuts it short, in one line; Spark commits nothing of it.
    second = _produce(control_plane, stream, seed=2)
    job = Job([*args, "--stop-grace", "0"], tmp_path / "run2")
    job.wait_for("the query", lambda: RUNNING in job.err())
    job.wait_for("batch 1 planned", (checkpoint / "offsets" / "1").exists)
    time.sleep(6.0)
    job.proc.send_signal(signal.SIGTERM)
    after, summary = job.end()
    assert not [line for line in after if NOISE.search(line)], after
    if after[0] == "… SIGTERM received: stopping the telemetry job":  # between batches
        after = after[1:]
    assert len(after) == 2, after
    assert re.fullmatch(
        r"… batch 1 (cut short \(SIGTERM received, no grace period\): not committed, it "
        r"is done again at the next start|not started \(Spark planned it "
        r"as the job stopped\): it is done at the next start)",
        after[0],
    ), after
    assert after[1].startswith("… this run: 0 micro-batches, 0 records, 0 stored"), after
    assert not (checkpoint / "commits" / "1").exists()
    assert int(summary["batches"]) == 1

    # 3. The next start does batch 1 (its events once, whatever the cut left stored).
    job = Job([*args, "--available-now"], tmp_path / "run3")
    after, summary = job.end()
    assert after[0].startswith(f"… batch 1: {EVENTS:,} records, "), after
    assert not [line for line in after if NOISE.search(line)], after
    assert int(summary["stored"]) == first.valid + second.valid
    assert int(summary["dead_letters"]) == len(first.poison_keys) + len(second.poison_keys)
    assert int(summary["batches"]) == 2
