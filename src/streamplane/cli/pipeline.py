"""`streamplane pipeline telemetry` (the Spark job) and `streamplane generate` (its input)."""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from streamplane.cli.connection import connect, connection_options
from streamplane.cli.output import progress, table
from streamplane.client.producer import StreamProducer
from streamplane.exceptions import ConfigError
from streamplane.pipeline.generator import generate as generate_records
from streamplane.pipeline.generator import produce, random_seed

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

    from streamplane.pipeline.telemetry import TelemetryJob


@click.group("pipeline")
def pipeline() -> None:
    """The PySpark data pipeline."""


@pipeline.command("install")
@click.option(
    "--print-jars", is_flag=True, help="Print the jars for spark-submit --jars (comma-separated)."
)
def install(print_jars: bool) -> None:
    """Resolve the Spark connectors (Delta Lake, Spark's Kafka source) with Maven."""
    from streamplane.local.distribution import spark_connectors
    from streamplane.pipeline.spark import connector_jars

    connectors = spark_connectors()
    if not connectors.is_resolved():
        progress(f"resolving the Spark connectors from {connectors.pom}")
    path = connectors.resolve()
    if print_jars:
        click.echo(",".join(str(j) for j in connector_jars(connectors)))
    else:
        click.echo(f"{len(connectors.jars())} jars on {path}")


@pipeline.command("telemetry")
@click.option("--stream", required=True, help="Stream of JSON telemetry events.")
@click.option("--group", default="telemetry-job", show_default=True, help="Consumer group.")
@click.option(
    "--warehouse",
    type=click.Path(path_type=Path),
    default=Path(".streamplane/warehouse"),
    show_default=True,
    help="Directory of the Delta tables.",
)
@click.option(
    "--checkpoint",
    type=click.Path(path_type=Path),
    default=None,
    help="Checkpoint directory (default: <warehouse>/_checkpoints/<stream>).",
)
@click.option(
    "--master",
    default="local[2]",
    show_default=True,
    help="Spark master URL ('' leaves it to spark-submit).",
)
@click.option("--trigger-seconds", type=float, default=2.0, show_default=True)
@click.option("--max-records-per-trigger", type=click.IntRange(min=1), default=None)
@click.option("--available-now", is_flag=True, help="Process what is there, then stop.")
@click.option("--duration", type=float, default=None, help="Stop after this many seconds.")
@click.option(
    "--stop-grace",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="On a stop (--duration, Ctrl-C, SIGTERM), seconds the running micro-batch may "
    "take to finish before it is cut short (done again at the next start); 0: at once.",
)
@connection_options
def telemetry(
    stream: str,
    group: str,
    warehouse: Path,
    checkpoint: Path | None,
    master: str,
    trigger_seconds: float,
    max_records_per_trigger: int | None,
    available_now: bool,
    duration: float | None,
    stop_grace: float,
    url: str,
    token: str | None,
) -> None:
    """Parse, validate (bad -> dlq lane), enrich and store telemetry events in Delta tables.

    Prints a line per micro-batch (records, stored, dead letters, duplicates, seconds)
    on stderr, then what this run did, and the store's summary (every run) at the end.

    A stop (--duration, Ctrl-C, SIGTERM) lets a running micro-batch finish (up to
    --stop-grace seconds) and stops between batches; a second Ctrl-C or SIGTERM cuts the
    batch short (it is done again at the next start), a third quits at once."""
    from streamplane.cli.connection import read_token_file
    from streamplane.pipeline.source import preflight_read
    from streamplane.pipeline.spark import build_session
    from streamplane.pipeline.telemetry import TelemetryConfig, TelemetryJob, store_summary

    if trigger_seconds <= 0:
        raise click.BadParameter("must be positive", param_hint="--trigger-seconds")
    for option, path in (("--warehouse", warehouse), ("--checkpoint", checkpoint)):
        _check_directory(path, option)
    config = TelemetryConfig(
        stream=stream,
        group=group,
        warehouse=warehouse.resolve(),
        checkpoint=(checkpoint or warehouse / "_checkpoints" / stream).resolve(),
        control_plane=url,
        token=token or read_token_file(),
        max_records_per_trigger=max_records_per_trigger,
        trigger_seconds=trigger_seconds,
    )
    preflight_read(config.read_options())  # one clear line before Spark's 20 s start
    spark = build_session(
        f"streamplane-telemetry-{stream}",
        master=master or None,
        small=bool(master.startswith("local")),
    )
    job = TelemetryJob(spark, config, on_batch=lambda report: progress(report.line()))
    try:
        query = job.start(available_now=available_now)
        where = master or "the spark-submit master"
        progress(f"telemetry job running on {where}; tables in {config.warehouse} (Ctrl-C stops)")
        _run_until_stopped(query, duration, job=job, grace_s=stop_grace)
        progress(_this_run(job))
        summary = store_summary(spark, config.warehouse)
        shown = [round(v, 1) if isinstance(v, float) else v for v in summary.values()]
        click.echo(table(list(summary), [shown]))
    finally:
        job.close()
        spark.stop()


_MIN_WAIT_S = 0.001  # the shortest wait PySpark's awaitTermination can send
_STOP_SIGNALS: dict[int, str] = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


def _run_until_stopped(
    query: StreamingQuery,
    duration: float | None,
    job: TelemetryJob | None = None,
    grace_s: float = 60.0,
) -> None:
    """Wait for ``query`` to end, for ``duration`` seconds or until Ctrl-C or SIGTERM,
    whichever comes first, then stop it between micro-batches (``TelemetryJob.stop``:
    the running one may finish within ``grace_s``; without ``job``, ``query.stop()``
    at once). Signals are taken in hand while the query runs: PySpark's own handler
    raised KeyboardInterrupt inside a Py4J call and left two screens of tracebacks. A
    second signal cuts the running batch short, a third quits at once."""
    asked: list[str] = []  # the signals received, by name
    first = threading.Event()
    stopping = threading.Event()
    cut_now = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        asked.append(_STOP_SIGNALS.get(signum, f"signal {signum}"))
        if first.is_set() or stopping.is_set():
            cut_now.set()
            for sig in _STOP_SIGNALS:  # the next one quits at once
                signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT
                              else signal.SIG_DFL)  # fmt: skip
            progress("cutting the running batch short (Ctrl-C again quits at once)")
        first.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
    try:
        deadline = None if duration is None else time.monotonic() + duration
        reason = ""
        while not first.is_set():
            wait = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            # PySpark sends int(wait * 1000) milliseconds, and Spark refuses 0 ("Timeout
            # has to be positive"): less than a millisecond left is the end. Seconds as
            # a float work; the stub says int.
            if wait < _MIN_WAIT_S:
                reason = f"--duration {duration:g}s reached"
                break
            if query.awaitTermination(wait):  # type: ignore[arg-type]
                return  # ended by itself (--available-now done)
        if first.is_set():
            reason = f"{asked[0]} received"
        stopping.set()
        if job is None:
            query.stop()
        else:
            job.stop(query, grace_s=grace_s, reason=reason, cut_now=cut_now, say=progress)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _this_run(job: TelemetryJob) -> str:
    """What this run stored (the summary table below it counts every run's)."""
    stats = job.stats
    line = (
        f"this run: {stats['batches']} micro-batch{'' if stats['batches'] == 1 else 'es'}, "
        f"{stats['rows']:,} records, {stats['inserted']:,} stored, "
        f"{stats['dlq_sent']:,} dead letters sent"
    )
    if stats["replays_skipped"]:
        line += f", {stats['replays_skipped']} replayed batches skipped"
    return line + "; the event store, every run:"


def _check_directory(path: Path | None, option: str) -> None:
    """A directory the job can create or write into (Spark's own error is a long Java
    stack trace). Checked by creating and removing a directory in its nearest existing
    ancestor: permission bits say nothing to root (``os.access`` passes ``/proc``),
    nor about read-only mounts."""
    if path is None:
        return
    existing = path.resolve()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise click.BadParameter(f"{existing} is not a directory", param_hint=option)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".streamplane-write-check-", dir=existing))
    except OSError as exc:
        raise click.BadParameter(
            f"{existing} is not writable ({exc.strerror or exc})", param_hint=option
        ) from None


@click.command("generate")
@click.option("--stream", required=True, help="Stream to write to.")
@click.option("--rate", type=float, default=1000.0, show_default=True, help="Events per second.")
@click.option("--duration", type=float, default=10.0, show_default=True, help="Seconds.")
@click.option("--poison-ratio", type=float, default=0.005, show_default=True)
@click.option("--duplicate-ratio", type=float, default=0.0, show_default=True)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=None,
    help="Seed of the events and their ids (default: a new random one per run, printed). "
    "The same seed sends the same event ids again, which the event store keeps once.",
)
@click.option(
    "--summary",
    "summary_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the ground-truth summary JSON here (default: stdout only).",
)
@connection_options
def generate(
    stream: str,
    rate: float,
    duration: float,
    poison_ratio: float,
    duplicate_ratio: float,
    seed: int | None,
    summary_path: Path | None,
    url: str,
    token: str | None,
) -> None:
    """Produce realistic telemetry events (logs, metrics, spans) with poison pills.

    Each run has its own event ids unless --seed repeats an earlier run."""
    if rate <= 0:
        raise click.BadParameter("must be positive", param_hint="--rate")
    if duration <= 0:
        raise click.BadParameter("must be positive", param_hint="--duration")
    for name, ratio in (("--poison-ratio", poison_ratio), ("--duplicate-ratio", duplicate_ratio)):
        if not 0 <= ratio <= 1:
            raise click.BadParameter("must be between 0 and 1", param_hint=name)
    if summary_path is not None:
        # Checked before anything is sent: the ground truth of sent records is not lost.
        try:
            summary_path.parent.mkdir(parents=True, exist_ok=True)
            summary_path.touch()
        except OSError as exc:
            raise ConfigError(f"cannot write the summary to {summary_path}: {exc}") from exc
    count = max(1, int(rate * duration))
    if seed is None:
        seed = random_seed()
    with connect(url, token) as client, StreamProducer(stream, client) as producer:
        lanes = producer.routing.lanes
        progress(
            f"producing {count:,} events to {stream} at {rate:g}/s "
            f"(seed {seed}: --seed {seed} sends this run again)"
        )
        started = time.monotonic()
        truth = produce(
            producer,
            generate_records(count, seed=seed, poison_ratio=poison_ratio, rate=rate, lanes=lanes),
            rate=rate,
            duplicate_ratio=duplicate_ratio,
            seed=seed,
            on_progress=_sending_progress(count, started),
        )
        elapsed = time.monotonic() - started
    summary = {"stream": stream, "seed": seed, "seconds": round(elapsed, 3), **truth.summary()}
    if summary_path is not None:
        try:
            summary_path.write_text(json.dumps(summary, indent=2) + "\n")  # checked above
        except OSError as exc:
            raise ConfigError(f"cannot write the summary to {summary_path}: {exc}") from exc
    shown = {k: v for k, v in summary.items() if k != "poison_keys"}
    click.echo(json.dumps(shown, indent=2))


PROGRESS_EVERY_S = 5.0


def _sending_progress(total: int, started: float) -> Callable[[int], None]:
    """``produce``'s per-record callback: a line every ``PROGRESS_EVERY_S`` seconds."""
    next_line = started + PROGRESS_EVERY_S

    def report(sent: int) -> None:
        nonlocal next_line
        now = time.monotonic()
        if now < next_line or sent >= total:
            return
        next_line = now + PROGRESS_EVERY_S
        progress(f"sent {sent:,} of {total:,} events ({sent / (now - started):,.0f}/s)")

    return report
