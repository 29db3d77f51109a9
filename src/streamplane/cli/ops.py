"""`streamplane ops ...`: fleet operations (kafka-kit's topicmappr, autothrottle, tags).

Thin: options become the ops/mapper params objects, the pure planners decide, and
``streamplane.ops`` talks to Kafka. Every plan is shown as the mapper's diff table
(moves per broker, storage before and after) before anything is applied, and applying
asks first unless ``--yes``. Progress and logs go to stderr; plans and tables to stdout.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from streamplane.cli.connection import (
    connect,
    connection_options,
    echo_json,
    format_tags,
    json_option,
    parse_key_values,
)
from streamplane.cli.control_plane import LOG_DATE_FORMAT
from streamplane.cli.output import progress, table
from streamplane.core.mapper import (
    BrokerState,
    PartitionMap,
    PlacementStrategy,
    Plan,
    RebalanceParams,
    RebuildParams,
    ScaleParams,
    rebalance,
    rebuild,
    scale,
)
from streamplane.core.text import human_bytes
from streamplane.core.throttle import ReplicaChange, ThrottleLimits
from streamplane.exceptions import (
    ConfigError,
    ControlPlaneUnavailable,
    KafkaError,
    StreamplaneError,
)
from streamplane.ops.autothrottle import (
    GIVE_UP_AFTER_S,
    Autothrottle,
    AutothrottleParams,
    Cleanup,
    Terminated,
    ThrottleStepsFailing,
    default_state_file,
    terminate_on,
)
from streamplane.ops.executor import (
    INTERRUPTS,
    READ_BOUND_S,
    STALL_WINDOW_S,
    CheckedPlan,
    Executor,
    ExecutorParams,
    Progress,
    ReassignmentTimeout,
    Stall,
    Standing,
    check_plan,
)
from streamplane.ops.kafka_ops import KafkaOpsAdmin
from streamplane.ops.metrics_fetcher import LogDirsSource, MetricsFetcher, cluster_view
from streamplane.ops.tags_client import TagsClient

BOOTSTRAP_ENV = "STREAMPLANE_BOOTSTRAP"
STATE_FILE_HELP = (
    "Autothrottle's record of what it set (default: "
    ".streamplane/ops/autothrottle-<hash>.json in the current directory, <hash> naming "
    "the bootstrap servers)."
)
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:[eE][0-9]+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_size(text: str) -> int:
    """``10GiB``, ``500MB``, ``2M``, ``1e6`` -> bytes (``Ki``/``Mi``... are powers of 1024)."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"expected a size like 10GiB or 500MB, got {text!r}")
    unit = (m.group(2) or "").lower()
    factor = 1024 ** "bkmgt".index(unit[0]) if "i" in unit else _UNITS[unit[:1]]
    return int(float(m.group(1)) * factor)


class ByteSize(click.ParamType[int, "str | int"]):
    """A size or a rate in bytes (per second) given as ``10GiB``, ``500MB``, ``2M``: an
    option of this type is checked when the command line is read, before any work."""

    def __init__(self, name: str, at_least: int) -> None:
        self.name = name
        self.at_least = at_least

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            size = parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if size < self.at_least:
            self.fail(f"must be at least {self.at_least} B, got {value!r}", param, ctx)
        return size


SIZE = ByteSize("size", at_least=0)
CAPACITY = ByteSize("size", at_least=1)
RATE = ByteSize("rate", at_least=1)  # a zero rate would stop replication
SECONDS = click.FloatRange(min=0, min_open=True)
"""A duration in seconds, > 0."""
FRACTION = click.FloatRange(min=0, max=1, min_open=True, max_open=True)
"""A fraction, 0 < x < 1 (the mapper's ``tolerance``)."""
FRACTION_OR_ZERO = click.FloatRange(min=0, max=1, max_open=True)
"""A fraction, 0 <= x < 1 (the mapper's ``storage_threshold``)."""
COUNT = click.IntRange(min=1)
"""A count, >= 1."""
BROKER_ID = click.IntRange(min=0)
"""A broker id, >= 0."""


def check_rate_range(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """Callback of ``--min-rate`` and ``--max-rate``: the second of the two to be read
    (click reads every option, given or defaulted) refuses a maximum below the minimum,
    before any work."""
    if param.name == "min_rate":
        low, high = value, ctx.params.get("max_rate")
    else:
        low, high = ctx.params.get("min_rate"), value
    if low is not None and high is not None and high < low:
        raise click.UsageError(f"--max-rate {high} B/s is below --min-rate {low} B/s", ctx)
    return value


# ---------------------------------------------------------------------- shared options
def cluster_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--cluster",
        default=None,
        help="A cluster registered in the control plane (see --url) instead of --bootstrap.",
    )(f)
    f = click.option(
        "--bootstrap",
        envvar=BOOTSTRAP_ENV,
        default=None,
        help=f"host:port,... (env {BOOTSTRAP_ENV}).",
    )(f)
    return connection_options(f)


def resolve_bootstrap(
    bootstrap: str | None, cluster: str | None, url: str, token: str | None
) -> str:
    if bootstrap and cluster:
        raise click.UsageError("give --bootstrap or --cluster, not both")
    if bootstrap:
        return bootstrap
    if cluster:
        try:
            with connect(url, token) as cp:
                return cp.cluster_bootstrap(cluster)
        except ControlPlaneUnavailable as exc:
            # The cluster itself may answer: ops commands need only its address.
            raise ControlPlaneUnavailable(
                f"{exc}; to reach {cluster} without it: --bootstrap HOST:PORT"
            ) from None
    raise click.UsageError(f"give --bootstrap (or {BOOTSTRAP_ENV}) or --cluster")


@contextlib.contextmanager
def open_admin(bootstrap: str) -> Iterator[KafkaOpsAdmin]:
    admin = KafkaOpsAdmin(bootstrap)
    try:
        yield admin
    finally:
        admin.close()


def executor_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for decorator in (
        click.option("-y", "--yes", is_flag=True, help="Apply (or cancel) without asking."),
        click.option(
            "--concurrency",
            type=click.IntRange(min=1),
            default=2,
            show_default=True,
            help="Destination brokers receiving replicas at once.",
        ),
        click.option(
            "--timeout",
            type=SECONDS,
            default=None,
            metavar="SECONDS",
            help="Stop waiting for a batch after this long (default: wait as long as it "
            "takes). Nothing is cancelled: the copy goes on in the cluster, exit 1.",
        ),
        click.option(
            "--stall-window",
            type=SECONDS,
            default=STALL_WINDOW_S,
            show_default=True,
            metavar="SECONDS",
            help="Warn when no partition has made progress for this long (the apply keeps "
            "waiting).",
        ),
        click.option("--poll-interval", type=SECONDS, default=1.0, show_default=True),
        click.option("--no-wait", is_flag=True, help="Submit every partition and return."),
        click.option(
            "--autothrottle",
            "throttle_capacity",
            type=RATE,
            default=None,
            metavar="RATE",
            help="Run autothrottle while applying, with this network capacity per broker "
            "(e.g. 100MB = 100 MB/s).",
        ),
        click.option(
            "--min-rate",
            type=RATE,
            default="1MB",
            show_default=True,
            callback=check_rate_range,
            help="Throttle floor (bytes/s).",
        ),
        click.option(
            "--max-rate",
            type=RATE,
            default=None,
            callback=check_rate_range,
            help="Throttle ceiling (bytes/s).",
        ),
        click.option(
            "--state-file",
            type=click.Path(path_type=Path, dir_okay=False),
            default=None,
            help=STATE_FILE_HELP,
        ),
    ):
        f = decorator(f)
    return f


def log_time(now: float | None = None) -> str:
    """The time a log line starts with, as `control-plane serve` stamps its lines (local
    time, milliseconds): ``2026-11-27 06:01:02.345``."""
    t = time.time() if now is None else now
    return time.strftime(LOG_DATE_FORMAT, time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"


class ProgressLine:
    """The progress of an apply on stderr: redrawn in place on a terminal; otherwise
    (nohup, CI) printed when it changes and at least every ``heartbeat_s`` seconds, so
    that a stalled apply still shows its elapsed time, each line (warnings too) starting
    with the time (``log_time``) so that a log shows the cadence.

    ``lookahead_s``: how long the next call may come after this one at most (the poll
    interval and a watch pass's bound): a line is printed once ``heartbeat_s -
    lookahead_s`` have passed, so that the next one is never more than ``heartbeat_s``
    away, however slow the passes in between."""

    def __init__(
        self,
        *,
        tty: bool | None = None,
        heartbeat_s: float = 15.0,
        lookahead_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._tty = sys.stderr.isatty() if tty is None else tty
        self._heartbeat_s = heartbeat_s
        self._every_s = max(heartbeat_s - lookahead_s, 0.0)
        self._clock = clock
        self._wall = wall
        self._status: str | None = None
        self._printed_at = 0.0
        self._drawn = False  # a terminal line is drawn without its newline

    def __call__(self, p: Progress) -> None:
        if self._tty:
            click.echo("\r" + p.line() + "\x1b[K", err=True, nl=False)
            self._drawn = True
            return
        now = self._clock()
        if p.status() != self._status or now - self._printed_at >= self._every_s:
            click.echo(f"{log_time(self._wall())} {p.line()}", err=True)
            self._status, self._printed_at = p.status(), now

    def note(self, message: str) -> None:
        """A message of its own line (a warning), below the progress line."""
        self.close()
        click.echo(message if self._tty else f"{log_time(self._wall())} {message}", err=True)

    def log(self, message: str) -> None:
        """A progress message (``cli.output.progress``'s form), as a note."""
        self.note(f"… {message}")

    def close(self) -> None:
        if self._drawn:
            click.echo("", err=True)
            self._drawn = False


class ThrottleSteps:
    """Autothrottle during an apply. The throttles are set before a batch is submitted
    (an error there stops the apply: no copy starts unthrottled); then a step runs at
    every poll, and a step that fails (a broker just restarted, a timeout) is reported,
    once per distinct error, and retried at the next poll: the throttles in force stay
    and the copies go on. Warnings are said once."""

    def __init__(self, throttle: Autothrottle, line: ProgressLine) -> None:
        self.throttle = throttle
        self._line = line
        self._failing: str | None = None

    def prepare(self, changes: list[ReplicaChange]) -> None:
        self.throttle.prepare(changes)

    def poll(self) -> None:
        try:
            result = self.throttle.step()
        except KafkaError as exc:
            if str(exc) != self._failing:
                self._line.note(
                    f"warning: throttle step failed, retried at the next poll (the throttles "
                    f"in force stay, the copies go on): {exc}"
                )
            self._failing = str(exc)
            return
        if self._failing is not None:
            self._line.note("throttle steps work again")
            self._failing = None
        for w in result.warnings:
            self._line.note(f"warning: {w}")


def show_plan(plan_: Plan, as_json: bool) -> None:
    if as_json:
        echo_json(plan_.to_dict())
        return
    click.echo(plan_.diff().render())
    before, after = plan_.storage_stats()
    if before.count:
        click.echo(
            f"free storage range {human_bytes(before.range)} -> {human_bytes(after.range)}, "
            f"stdev {human_bytes(int(before.stdev))} -> {human_bytes(int(after.stdev))}"
        )
    if plan_.tolerance is not None:
        click.echo(f"tolerance {plan_.tolerance:g}")
    for w in plan_.warnings:
        click.echo(f"warning: {w}", err=True)


def apply_checked(
    admin: KafkaOpsAdmin,
    bootstrap: str,
    checked: CheckedPlan,
    *,
    yes: bool,
    concurrency: int,
    timeout: float | None,
    stall_window: float,
    poll_interval: float,
    no_wait: bool,
    throttle_capacity: int | None,
    min_rate: int,
    max_rate: int | None,
    state_file: Path | None,
    cluster: str | None = None,
    plan_file: str | None = None,
) -> None:
    """Apply a checked plan (asking first unless ``yes``). However it ends, the message
    says where the reassignments stand and what became of the throttles: removed, or
    left (copies still running, or a removal that failed) with the command that ends
    them. SIGTERM exits 143, Ctrl-C 130, other endings short of success 1.

    ``plan_file``: where the plan is (named in the command that resumes watching after
    a ``timeout``)."""
    if not checked.changes():
        click.echo("nothing to apply: every partition already has its target replicas")
        return
    if checked.resumed:
        click.echo(
            f"{len(checked.resumed)} partition(s) already being reassigned to the plan's "
            "replicas (an earlier apply of it): watched, not submitted again",
            err=True,
        )
    if not yes:
        confirm_or_exit(f"apply {len(checked.changes())} partition change(s)?")
    state_file = state_file or default_state_file(bootstrap)
    same = _cluster_args(bootstrap, cluster, state_file)
    # The next progress call comes at most a poll and a bounded watch pass later.
    line = ProgressLine(lookahead_s=poll_interval + READ_BOUND_S)
    throttle: Autothrottle | None = None
    if throttle_capacity is not None:
        throttle = Autothrottle(
            admin,
            AutothrottleParams(
                capacity=throttle_capacity,
                limits=ThrottleLimits(minimum=min_rate, maximum=max_rate),
                state_file=state_file,
                interval=poll_interval,
            ),
            bootstrap=bootstrap,
            log=line.log,
            clear_command=f"streamplane ops throttle {same} --clear",
        )
        throttle.take_over()
    steps = None if throttle is None else ThrottleSteps(throttle, line)
    executor = Executor(
        admin,
        ExecutorParams(
            concurrency, poll_interval, timeout, wait=not no_wait, stall_window=stall_window
        ),
        on_progress=line,
        on_poll=(lambda: None) if steps is None else steps.poll,
        before_submit=(lambda _: None) if steps is None else steps.prepare,
        on_stall=lambda stall: line.note(_stall_text(stall, bootstrap, same)),
    )
    try:
        with contextlib.closing(line), terminate_on(signal.SIGTERM):
            report = executor.apply(checked)
    except INTERRUPTS as exc:
        click.echo(f"{exc or 'interrupted'}: {_ended(executor, checked, throttle, same)}", err=True)
        raise SystemExit(143 if isinstance(exc, Terminated) else 130) from None
    except ReassignmentTimeout as exc:
        # Stopped waiting, nothing cancelled; the throttles of copies still running stay.
        def resume(standing: Standing) -> str:
            return _resume_text(standing, plan_file, same, cancel=throttle is None)

        ending = _ended(executor, checked, throttle, same, resume=resume)
        raise KafkaError(f"{exc} (--timeout); {ending}", code=exc.code) from exc
    except StreamplaneError as exc:
        ending = _ended(executor, checked, throttle, same)
        raise KafkaError(f"{exc}; {ending}", code=getattr(exc, "code", None)) from exc
    except Exception:
        click.echo(f"apply failed: {_ended(executor, checked, throttle, same)}", err=True)
        raise
    cleanup, throttles = _end_throttles(throttle, same)
    # The last line of a clean end says what became of the throttles too.
    ended = throttles if cleanup is not None and not cleanup.left else ""
    if no_wait:
        resumed = f" ({len(report.resumed)} already running)" if report.resumed else ""
        click.echo(f"submitted {len(report.submitted)} reassignment(s){resumed}{ended}")
    else:
        done = f"{len(report.completed)} partition(s) reassigned in {report.elapsed:.1f}s"
        click.echo(done + ended)
    for key, err in sorted(report.failed.items()):
        click.echo(f"failed: {key[0]}-{key[1]}: {err}", err=True)
    if report.failed:
        raise ConfigError(
            f"{len(report.failed)} partition(s) were refused by the cluster{throttles}"
        )
    if cleanup is not None and cleanup.left:
        if not cleanup.running:
            done = "submitted" if no_wait else "done"
            raise KafkaError(f"the reassignments are {done}{throttles}")
        click.echo(throttles.removeprefix("; "), err=True)


def confirm_or_exit(
    question: str, *, declined: str = "not applied", yes_does: str = "applies without asking"
) -> None:
    """Ask before applying. Answering no, or nothing (end of input, as from a script),
    exits 1, not 130: neither is an interrupt (Ctrl-C at the prompt is, and gives 130)."""
    try:
        yes = click.confirm(question, err=True)
    except click.exceptions.Abort as exc:
        if not isinstance(exc.__context__, EOFError):
            raise
        click.echo(f"\nno answer (end of input): {declined}; --yes {yes_does}", err=True)
        raise SystemExit(1) from None
    if not yes:
        click.echo(declined, err=True)
        raise SystemExit(1)


def cancel_reassignments(
    admin: KafkaOpsAdmin, bootstrap: str, *, yes: bool
) -> list[tuple[str, int]]:
    """``ops apply --cancel``: name what would be cancelled and ask (unless ``yes``),
    then cancel exactly that. Without a terminal to ask on (stdin is not a TTY) and
    without ``yes``, refuse: exit 2, nothing cancelled. Returns the cancelled."""
    running = sorted(admin.list_reassignments())
    if not running:
        click.echo("no reassignment in progress: nothing to cancel")
        return []
    topics = sorted({t for t, _ in running})
    what = (
        f"{len(running)} reassignment(s) in progress on {bootstrap} "
        f"(topic(s) {', '.join(topics)}: {_partition_names(running)})"
    )
    if not yes:
        if not sys.stdin.isatty():
            click.echo(
                f"error: refusing to cancel {what} without confirmation: stdin is not a "
                "terminal to ask on; pass --yes (-y) to cancel them without asking",
                err=True,
            )
            raise SystemExit(2)
        confirm_or_exit(
            f"cancel {what}? (their partitions go back to the replicas they had)",
            declined="nothing cancelled",
            yes_does="cancels without asking",
        )
    done = Executor(admin).cancel(running)
    ended = len(running) - len(done)
    gone = f" ({ended} had ended before they could be cancelled)" if ended else ""
    click.echo(f"cancelled {len(done)} reassignment(s){gone}")
    return done


def _partition_names(keys: list[tuple[str, int]], limit: int = 10) -> str:
    shown = ", ".join(f"{t}-{p}" for t, p in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _cluster_args(bootstrap: str, cluster: str | None, state_file: Path) -> str:
    """The options that find this cluster and state file again (for the commands a
    message names)."""
    args = f"--cluster {shlex.quote(cluster)}" if cluster else f"--bootstrap {bootstrap}"
    if state_file != default_state_file(bootstrap):
        args += f" --state-file {shlex.quote(str(state_file))}"
    return args


def _ended(
    executor: Executor,
    checked: CheckedPlan,
    throttle: Autothrottle | None,
    same: str,
    *,
    resume: Callable[[Standing], str] | None = None,
) -> str:
    """After an apply ended early: where its reassignments stand, (``resume``) how to
    go on from there, and its throttles."""
    cancel_error = executor.report.cancel_error
    failed = f"cancelling failed: {cancel_error}; " if cancel_error else ""
    standing = executor.standing(checked)
    how = "" if resume is None else resume(standing)
    how = f"; {how}" if how else ""
    return f"{failed}{standing.text()}{how}{_end_throttles(throttle, same)[1]}"


def _resume_text(standing: Standing, plan_file: str | None, same: str, *, cancel: bool) -> str:
    """How to go on after ``--timeout``: watch the copies again (and submit the rest of
    the plan), or (``cancel``) cancel them; with autothrottle, the throttles' message
    names the cancel command."""
    if not standing.running and not standing.not_submitted:
        return ""
    plan = shlex.quote(plan_file) if plan_file else "PLAN_FILE"
    where = "" if plan_file else " (the plan's JSON: `ops map ... --out PLAN_FILE` writes it)"
    again = f"`streamplane ops apply {plan} {same}` (with the same options)"
    if not standing.running:
        return f"{again} submits the rest of the plan{where}"
    text = (
        f"the copies go on in the cluster: {again} watches them again, without submitting "
        f"them again, and submits the rest of the plan{where}"
    )
    if cancel:
        text += f"; `streamplane ops apply --cancel {same}` cancels them"
    return text


def _stall_text(stall: Stall, bootstrap: str, same: str) -> str:
    """The warning of a stalled batch: the stuck partitions and the commands to inspect
    or cancel them (the apply keeps waiting)."""
    if stall.moving:
        return stall.text()
    topics = shlex.quote("|".join(stall.topics()))
    return (
        f"warning: {stall.text()}. The apply keeps waiting (nothing is cancelled; "
        "--timeout stops waiting). Inspect: "
        f"`kafka-reassign-partitions.sh --bootstrap-server {bootstrap} --list`, "
        f"`kafka-topics.sh --bootstrap-server {bootstrap} --describe --topic {topics}` "
        "(replicas and ISR), the destination brokers' logs; a destination short of disk "
        "or a throttle too low stalls a copy. Cancel: Ctrl-C (this batch), or "
        f"`streamplane ops apply --cancel {same}` (every reassignment in progress)"
    )


def _end_throttles(throttle: Autothrottle | None, same: str) -> tuple[Cleanup | None, str]:
    """End an apply's throttles (``finish()``: removed unless copies still run); returns
    the cleanup and what became of them as ``; ...`` (nothing without autothrottle)."""
    if throttle is None:
        return None, ""
    cleanup = throttle.finish()
    return cleanup, "; " + _throttles_text(cleanup, throttle.params.state_file, same)


def _throttles_text(cleanup: Cleanup, state_file: Path, same: str) -> str:
    if cleanup.running:
        return (
            f"reassignments are still running: their throttles stay, recorded in {state_file}: "
            f"`streamplane ops throttle {same} --capacity RATE` keeps throttling them and "
            f"removes the throttles when they end; `streamplane ops apply --cancel {same}` "
            "stops them and removes the throttles"
        )
    if cleanup.left:
        return (
            f"throttles not removed from {cleanup.left_text()}: they stay, recorded in "
            f"{state_file}; `streamplane ops throttle {same} --clear` removes them"
        )
    return "throttles removed"


def remove_recorded_throttles(admin: KafkaOpsAdmin, bootstrap: str, state_file: Path) -> Cleanup:
    """Remove the throttles an ``--autothrottle`` run left with its reassignments
    (``--timeout``, ``--no-wait``, a kill): what its state file records."""
    return Autothrottle(
        admin,
        AutothrottleParams(capacity=1, limits=ThrottleLimits(minimum=1), state_file=state_file),
        bootstrap=bootstrap,
        log=progress,
    ).recover()


# ---------------------------------------------------------------------- groups
@click.group("ops")
def ops() -> None:
    """Fleet operations: partition maps, reassignments, throttles and tags."""


@ops.group("map")
def map_() -> None:
    """Plan partition placement (rebuild, rebalance, scale) and optionally apply it."""


allow_mixed_option = click.option(
    "--allow-mixed-replication",
    is_flag=True,
    help="Apply a plan that leaves partitions of a topic with different replica counts.",
)


def map_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for decorator in (
        click.option(
            "--topics", multiple=True, metavar="REGEX", help="Topics to plan (default: all)."
        ),
        click.option(
            "--capacity",
            type=CAPACITY,
            default=None,
            metavar="SIZE",
            help="Storage per broker: free = SIZE - bytes held (brokers sharing a disk).",
        ),
        click.option(
            "--new", "new_ids", multiple=True, type=BROKER_ID, help="A broker to treat as new."
        ),
        click.option(
            "--retire", multiple=True, type=BROKER_ID, help="A broker to move everything off."
        ),
        click.option("--dead", multiple=True, type=BROKER_ID, help="A broker to treat as dead."),
        click.option(
            "--broker-rack",
            "broker_racks",
            multiple=True,
            metavar="ID=RACK",
            callback=check_broker_racks,
            help="The rack of a dead broker (the cluster no longer says).",
        ),
        click.option(
            "--min-rack-ids", type=COUNT, default=None, help="Accept fewer racks than replicas."
        ),
        click.option("--optimize-leadership", is_flag=True, help="Balance preferred leaders."),
        click.option(
            "--out",
            type=click.Path(path_type=Path, dir_okay=False),
            default=None,
            help="Write Kafka's reassignment JSON here.",
        ),
        click.option("--apply", "do_apply", is_flag=True, help="Apply the plan after showing it."),
        allow_mixed_option,
        json_option,
        executor_options,
        cluster_options,
    ):
        f = decorator(f)
    return f


@contextlib.contextmanager
def flag_names() -> Iterator[None]:
    """Planner messages name the mapper's Python parameters (``pass min_rack_ids=3``); on
    the command line they are flags (``--min-rack-ids 3``)."""
    try:
        yield
    except StreamplaneError as exc:
        text = _PARAM_NAME.sub(lambda m: _flag(m.group(1), m.group(2)), str(exc))
        if text == str(exc):
            raise
        raise ConfigError(text) from exc


# The mapper parameters spelt differently as flags (names with an underscore).
_FLAG_PARAMS = (
    "min_rack_ids",
    "replication_factor",
    "substitution_affinity",
    "optimize_leadership",
    "storage_threshold_bytes",
    "storage_threshold",
    "partition_limit",
    "min_partition_size",
    "locality_scoped",
    "allow_mixed_replication",
)
_PARAM_NAME = re.compile(rf"\b({'|'.join(_FLAG_PARAMS)})\b(?:=([^\s,;:)]+))?")


def _broker_rack(item: str) -> tuple[int, str]:
    bid, sep, rack = item.partition("=")
    if not sep or not bid.strip().isdigit() or not rack.strip():
        raise click.BadParameter(f"expected ID=RACK, got {item!r}", param_hint="--broker-rack")
    return int(bid), rack.strip()


def check_broker_racks(
    _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    """Callback of ``--broker-rack``: each is ``ID=RACK``, checked before any work."""
    for item in value:
        _broker_rack(item)
    return value


def _flag(param: str, value: str | None) -> str:
    flag = "--" + param.replace("_", "-")
    return flag if value is None else f"{flag} {value}"


def _planning(
    bootstrap: str,
    topics: tuple[str, ...],
    capacity: int | None,
    new_ids: tuple[int, ...],
    retire: tuple[int, ...],
    dead: tuple[int, ...],
    broker_racks: tuple[str, ...],
) -> tuple[KafkaOpsAdmin, Any]:
    for first, second, a, b in (
        ("--dead", "--new", dead, new_ids),
        ("--dead", "--retire", dead, retire),
        ("--retire", "--new", retire, new_ids),
    ):
        both = sorted(set(a) & set(b))
        if both:
            raise ConfigError(
                f"broker(s) {', '.join(map(str, both))} given as both {first} and {second}: "
                "give each broker one state"
            )
    racks = dict(_broker_rack(item) for item in broker_racks)
    admin = KafkaOpsAdmin(bootstrap)
    try:
        fetcher = MetricsFetcher(LogDirsSource(admin, capacity=capacity))
        states = (
            {b: BrokerState.NEW for b in new_ids}
            | {b: BrokerState.RETIRING for b in retire}
            | {b: BrokerState.DEAD for b in dead}
        )
        view = cluster_view(admin, fetcher, topics=topics, states=states, racks=racks)
    except BaseException:
        admin.close()
        raise
    for w in view.warnings:
        click.echo(f"warning: {w}", err=True)
    return admin, view


def _finish(
    admin: KafkaOpsAdmin,
    bootstrap: str,
    cluster: str | None,
    plan_: Plan,
    out: Path | None,
    as_json: bool,
    do_apply: bool,
    exec_opts: dict[str, Any],
    capacity: int | None,
) -> None:
    allow_mixed_replication = bool(exec_opts.pop("allow_mixed_replication", False))
    try:
        show_plan(plan_, as_json)
        # The plan carries the storage it was made with, for `ops apply` to show the same.
        document = plan_.to_reassignment_json(indent=2, meta={"capacity": capacity})
        if out is not None:
            out.write_text(document + "\n")
            click.echo(f"reassignment JSON written to {out}", err=True)
        if not plan_.changed_partitions():
            click.echo("no partition changes", err=True)
            return
        if do_apply:
            with flag_names():
                checked = check_plan(
                    document, admin, allow_mixed_replication=allow_mixed_replication
                )
            plan_file = None if out is None else str(out)
            apply_checked(
                admin, bootstrap, checked, cluster=cluster, plan_file=plan_file, **exec_opts
            )
    finally:
        admin.close()


@map_.command("rebuild")
@click.option(
    "--strategy",
    type=click.Choice([s.value for s in PlacementStrategy]),
    default="count",
    show_default=True,
)
@click.option("--force", is_flag=True, help="Re-place every replica from scratch.")
@click.option("--replication-factor", type=COUNT, default=None)
@click.option(
    "--substitution-affinity",
    is_flag=True,
    help="Send a replaced broker's replicas to a new broker in its rack.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@map_options
def map_rebuild(
    strategy: str,
    force: bool,
    replication_factor: int | None,
    substitution_affinity: bool,
    seed: int,
    topics: tuple[str, ...],
    capacity: int | None,
    new_ids: tuple[int, ...],
    retire: tuple[int, ...],
    dead: tuple[int, ...],
    broker_racks: tuple[str, ...],
    min_rack_ids: int | None,
    optimize_leadership: bool,
    out: Path | None,
    do_apply: bool,
    as_json: bool,
    bootstrap: str | None,
    cluster: str | None,
    url: str,
    token: str | None,
    **exec_opts: Any,
) -> None:
    """Replace dead or retiring brokers (minimal movement), force a re-placement or change RF."""
    bs = resolve_bootstrap(bootstrap, cluster, url, token)
    admin, view = _planning(bs, topics, capacity, new_ids, retire, dead, broker_racks)
    params = RebuildParams(
        strategy=PlacementStrategy(strategy),
        force=force,
        replication_factor=replication_factor,
        min_rack_ids=min_rack_ids,
        substitution_affinity=substitution_affinity,
        optimize_leadership=optimize_leadership,
        seed=seed,
    )
    try:
        with flag_names():
            plan_ = rebuild(view.partitions, view.brokers, params)
    except BaseException:
        admin.close()
        raise
    _finish(admin, bs, cluster, plan_, out, as_json, do_apply, exec_opts, capacity)


def _relocation_kwargs(
    tolerance: float | None,
    partition_limit: int,
    min_partition_size: int,
    locality_scoped: bool,
    min_rack_ids: int | None,
    optimize_leadership: bool,
) -> dict[str, Any]:
    return {
        "tolerance": tolerance,
        "partition_limit": partition_limit,
        "min_partition_size": min_partition_size,
        "locality_scoped": locality_scoped,
        "min_rack_ids": min_rack_ids,
        "optimize_leadership": optimize_leadership,
    }


def relocation_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for decorator in (
        click.option(
            "--tolerance",
            type=FRACTION,
            default=None,
            help="Fixed tolerance, 0 < x < 1 (default: sweep).",
        ),
        click.option("--partition-limit", type=COUNT, default=30, show_default=True),
        click.option("--min-partition-size", type=SIZE, default="0", show_default=True),
        click.option("--locality-scoped", is_flag=True, help="Move only within the source's rack."),
    ):
        f = decorator(f)
    return f


@map_.command("rebalance")
@click.option(
    "--storage-threshold",
    type=FRACTION_OR_ZERO,
    default=0.2,
    show_default=True,
    help="Offload brokers whose free storage is more than this fraction (0 <= x < 1) below "
    "the harmonic mean (0: every broker).",
)
@click.option("--storage-threshold-bytes", type=CAPACITY, default=None, metavar="SIZE")
@relocation_options
@map_options
def map_rebalance(
    storage_threshold: float,
    storage_threshold_bytes: int | None,
    tolerance: float | None,
    partition_limit: int,
    min_partition_size: int,
    locality_scoped: bool,
    topics: tuple[str, ...],
    capacity: int | None,
    new_ids: tuple[int, ...],
    retire: tuple[int, ...],
    dead: tuple[int, ...],
    broker_racks: tuple[str, ...],
    min_rack_ids: int | None,
    optimize_leadership: bool,
    out: Path | None,
    do_apply: bool,
    as_json: bool,
    bootstrap: str | None,
    cluster: str | None,
    url: str,
    token: str | None,
    **exec_opts: Any,
) -> None:
    """Move partitions off brokers short of free storage (tolerance sweep)."""
    bs = resolve_bootstrap(bootstrap, cluster, url, token)
    admin, view = _planning(bs, topics, capacity, new_ids, retire, dead, broker_racks)
    try:
        params = RebalanceParams(
            storage_threshold=storage_threshold,
            storage_threshold_bytes=storage_threshold_bytes,
            **_relocation_kwargs(
                tolerance,
                partition_limit,
                min_partition_size,
                locality_scoped,
                min_rack_ids,
                optimize_leadership,
            ),
        )
        with flag_names():
            plan_ = rebalance(view.partitions, view.brokers, params)
    except BaseException:
        admin.close()
        raise
    _finish(admin, bs, cluster, plan_, out, as_json, do_apply, exec_opts, capacity)


@map_.command("scale")
@click.option(
    "--strategy",
    type=click.Choice([s.value for s in PlacementStrategy]),
    default="storage",
    show_default=True,
)
@click.option("--seed", type=int, default=0, show_default=True)
@relocation_options
@map_options
def map_scale(
    strategy: str,
    seed: int,
    tolerance: float | None,
    partition_limit: int,
    min_partition_size: int,
    locality_scoped: bool,
    topics: tuple[str, ...],
    capacity: int | None,
    new_ids: tuple[int, ...],
    retire: tuple[int, ...],
    dead: tuple[int, ...],
    broker_racks: tuple[str, ...],
    min_rack_ids: int | None,
    optimize_leadership: bool,
    out: Path | None,
    do_apply: bool,
    as_json: bool,
    bootstrap: str | None,
    cluster: str | None,
    url: str,
    token: str | None,
    **exec_opts: Any,
) -> None:
    """Spread replicas onto new brokers (brokers holding nothing yet, or --new)."""
    bs = resolve_bootstrap(bootstrap, cluster, url, token)
    admin, view = _planning(bs, topics, capacity, new_ids, retire, dead, broker_racks)
    try:
        params = ScaleParams(
            strategy=PlacementStrategy(strategy),
            seed=seed,
            **_relocation_kwargs(
                tolerance,
                partition_limit,
                min_partition_size,
                locality_scoped,
                min_rack_ids,
                optimize_leadership,
            ),
        )
        with flag_names():
            plan_ = scale(view.partitions, view.brokers, params)
    except BaseException:
        admin.close()
        raise
    _finish(admin, bs, cluster, plan_, out, as_json, do_apply, exec_opts, capacity)


# ---------------------------------------------------------------------- apply
@ops.command("apply")
@click.argument("plan_file", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--cancel",
    is_flag=True,
    help="Cancel every reassignment in progress instead (named, and asked first unless "
    "--yes; without a terminal, --yes is required), and remove the throttles an "
    "--autothrottle run left with them (its --state-file).",
)
@allow_mixed_option
@json_option
@executor_options
@cluster_options
def apply(
    plan_file: Path | None,
    cancel: bool,
    allow_mixed_replication: bool,
    as_json: bool,
    bootstrap: str | None,
    cluster: str | None,
    url: str,
    token: str | None,
    **exec_opts: Any,
) -> None:
    """Apply Kafka's reassignment JSON (PLAN_FILE, '-' for stdin) after showing its diff."""
    if cancel and plan_file is not None:
        raise click.UsageError("PLAN_FILE and --cancel cannot be combined")
    if not cancel and plan_file is None:
        raise click.UsageError("give a PLAN_FILE to apply, or --cancel")
    bs = resolve_bootstrap(bootstrap, cluster, url, token)
    with open_admin(bs) as admin:
        if cancel:
            cancel_reassignments(admin, bs, yes=exec_opts["yes"])
            state_file = exec_opts["state_file"] or default_state_file(bs)
            cleanup = remove_recorded_throttles(admin, bs, state_file)
            if cleanup.removed:
                click.echo(f"removed throttles from {len(cleanup.removed)} resource(s)")
            if cleanup.left:
                same = _cluster_args(bs, cluster, state_file)
                raise KafkaError(_throttles_text(cleanup, state_file, same))
            return
        assert plan_file is not None
        try:
            text = sys.stdin.read() if str(plan_file) == "-" else plan_file.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read {plan_file}: {exc.strerror}") from exc
        with flag_names():
            checked = check_plan(text, admin, allow_mixed_replication=allow_mixed_replication)
        # The storage picture the plan was made with: the capacity `ops map --capacity`
        # planned against (carried in the plan), else the brokers' disk figures, with
        # the same warnings (brokers sharing one filesystem, ...).
        view = cluster_view(
            admin,
            MetricsFetcher(LogDirsSource(admin, capacity=checked.capacity)),
            topics=[re.escape(t) for t in checked.target.topics()],
            include_internal=True,
            new_when_empty=False,
        )
        for w in view.warnings:
            click.echo(f"warning: {w}", err=True)
        if checked.capacity is not None:
            click.echo(
                f"storage per broker: {human_bytes(checked.capacity)} as planned (ops map "
                "--capacity): free = that less what each broker holds",
                err=True,
            )
        # Every partition of the plan's topics, as `ops map --topics` shows them; resumed
        # partitions with the replicas they had, not the union.
        before = PartitionMap(
            p.with_replicas(checked.current[p.key].replicas) if p.key in checked.current else p
            for p in view.partitions
        )
        after = PartitionMap(
            p.with_replicas(checked.target[p.key].replicas) if p.key in checked.target else p
            for p in before
        )
        show_plan(Plan("apply", before, after, view.brokers), as_json)
        apply_checked(admin, bs, checked, cluster=cluster, plan_file=str(plan_file), **exec_opts)


# ---------------------------------------------------------------------- throttle
@ops.command("throttle")
@click.option(
    "--capacity",
    "capacity_",
    type=RATE,
    default=None,
    metavar="RATE",
    help="Network capacity per broker, bytes/s.",
)
@click.option("--min-rate", type=RATE, default="1MB", show_default=True, callback=check_rate_range)
@click.option("--max-rate", type=RATE, default=None, callback=check_rate_range)
@click.option(
    "--interval", type=SECONDS, default=5.0, show_default=True, help="Seconds between steps."
)
@click.option(
    "--give-up-after",
    type=SECONDS,
    default=GIVE_UP_AFTER_S,
    show_default=True,
    metavar="SECONDS",
    help="A failing step (a broker call error) is retried at every interval, the throttles "
    "in force kept; give up (remove the throttles, exit 1) once steps have failed without "
    "a break for this long.",
)
@click.option(
    "--state-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help=STATE_FILE_HELP,
)
@click.option("--forever", is_flag=True, help="Keep watching after reassignments finish.")
@click.option(
    "--clear", "clear_only", is_flag=True, help="Only remove throttles a run left behind."
)
@cluster_options
def throttle(
    capacity_: int | None,
    min_rate: int,
    max_rate: int | None,
    interval: float,
    give_up_after: float,
    state_file: Path | None,
    forever: bool,
    clear_only: bool,
    bootstrap: str | None,
    cluster: str | None,
    url: str,
    token: str | None,
) -> None:
    """Throttle replication while reassignments run; remove every throttle afterwards.

    Starts from the throttles a killed run left (its state file): taken over while
    reassignments run, removed if none does. Exits once no reassignment is running
    (unless --forever), on SIGTERM or Ctrl-C, always clearing. A step that fails is
    retried at the next interval (the throttles stay) until --give-up-after.
    """
    bs = resolve_bootstrap(bootstrap, cluster, url, token)
    if capacity_ is None and not clear_only:
        raise click.UsageError("--capacity is required (the network capacity of a broker)")
    params = AutothrottleParams(
        capacity=capacity_ or 1,
        limits=ThrottleLimits(minimum=min_rate, maximum=max_rate),
        state_file=state_file or default_state_file(bs),
        interval=interval,
        give_up_after=give_up_after,
    )
    same = _cluster_args(bs, cluster, params.state_file)
    with open_admin(bs) as admin:
        at = Autothrottle(
            admin,
            params,
            bootstrap=bs,
            log=progress,
            clear_command=f"streamplane ops throttle {same} --clear",
        )
        if clear_only:
            cleanup = at.recover()
            click.echo(f"removed throttles from {len(cleanup.removed)} resource(s)")
            if cleanup.left:
                raise KafkaError(_throttles_text(cleanup, params.state_file, same))
            return
        try:
            with terminate_on(signal.SIGTERM):
                steps = at.run(until_idle=not forever)
        except Terminated as exc:
            click.echo(f"{exc}: {_throttles_left_text(at, same)}", err=True)
            raise SystemExit(143) from None
        except ThrottleStepsFailing as exc:
            raise KafkaError(
                f"{exc}; gave up (--give-up-after): {_throttles_left_text(at, same)}",
                code=exc.code,
            ) from exc
        if at.recorded():
            raise KafkaError(f"no reassignment running; {_throttles_left_text(at, same)}")
        click.echo(f"no reassignment running; throttles removed after {steps} step(s)")


def _throttles_left_text(at: Autothrottle, same: str) -> str:
    """After ``run()`` (which always removes what it can): what is left, if anything."""
    left = at.recorded()
    if not left:
        return "throttles removed"
    return (
        f"throttles not removed from {', '.join(r.replace(':', ' ', 1) for r in left)} (see "
        f"above): they stay, recorded in {at.params.state_file}; "
        f"`streamplane ops throttle {same} --clear` removes them"
    )


# ---------------------------------------------------------------------- tags
@ops.group("tags")
def tags() -> None:
    """Tag brokers and topics in the control plane; find them; place topics by tags."""


def _tag_rows(rows: list[dict[str, Any]], key: str) -> str:
    return table([key, "tags"], [[r[key], format_tags(r["tags"])] for r in rows])


@tags.command("set")
@click.argument("cluster")
@click.argument("kind", type=click.Choice(["broker", "topic"]))
@click.argument("name")
@click.option("--tag", "tag_items", multiple=True, metavar="KEY=VALUE", help="Replaces the tags.")
@json_option
@connection_options
def tags_set(
    cluster: str,
    kind: str,
    name: str,
    tag_items: tuple[str, ...],
    as_json: bool,
    url: str,
    token: str | None,
) -> None:
    """Replace the tags of a broker (by id) or a topic of CLUSTER."""
    with connect(url, token) as cp:
        doc = TagsClient(cp).set_tags(cluster, kind, name, parse_key_values(tag_items, "--tag"))
    if as_json:
        echo_json(doc)
    else:
        click.echo(f"{kind} {name} of {cluster}: {format_tags(doc['tags'])}")


@tags.command("list")
@click.argument("cluster")
@click.argument("kind", type=click.Choice(["broker", "topic"]))
@click.option("--tag", "tag_items", multiple=True, metavar="KEY=VALUE", help="Filter (ANDed).")
@json_option
@connection_options
def tags_list(
    cluster: str, kind: str, tag_items: tuple[str, ...], as_json: bool, url: str, token: str | None
) -> None:
    """Brokers or topics of CLUSTER having every --tag."""
    with connect(url, token) as cp:
        rows = TagsClient(cp).list_tagged(cluster, kind, parse_key_values(tag_items, "--tag"))
    key = "broker_id" if kind == "broker" else "topic"
    if as_json:
        echo_json(rows)
    else:
        click.echo(_tag_rows(rows, key))


@tags.command("create-topic")
@click.argument("cluster")
@click.argument("topic")
@click.option("--partitions", type=COUNT, default=1, show_default=True)
@click.option("--replication-factor", type=COUNT, default=1, show_default=True)
@click.option(
    "--broker-tag",
    "broker_tags",
    multiple=True,
    metavar="KEY=VALUE",
    help="Brokers to use (ANDed).",
)
@click.option(
    "--tag", "tag_items", multiple=True, metavar="KEY=VALUE", help="Tags of the new topic."
)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE")
@click.option("--min-rack-ids", type=COUNT, default=None)
@json_option
@connection_options
def tags_create_topic(
    cluster: str,
    topic: str,
    partitions: int,
    replication_factor: int,
    broker_tags: tuple[str, ...],
    tag_items: tuple[str, ...],
    configs: tuple[str, ...],
    min_rack_ids: int | None,
    as_json: bool,
    url: str,
    token: str | None,
) -> None:
    """Create TOPIC on the brokers of CLUSTER that have every --broker-tag."""
    with connect(url, token) as cp, flag_names():
        doc = TagsClient(cp).create_topic(
            cluster,
            topic,
            partitions=partitions,
            replication_factor=replication_factor,
            broker_tags=parse_key_values(broker_tags, "--broker-tag"),
            tags=parse_key_values(tag_items, "--tag"),
            config=parse_key_values(configs, "--config"),
            min_rack_ids=min_rack_ids,
        )
    if as_json:
        echo_json(doc)
        return
    click.echo(f"created {topic} on brokers {doc['brokers']}")
    click.echo(
        table(
            ["partition", "replicas"],
            [
                [p, ",".join(map(str, r))]
                for p, r in sorted(doc["assignment"].items(), key=lambda x: int(x[0]))
            ],
        )
    )
