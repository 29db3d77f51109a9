"""`streamplane lag [--group G] [--stream S] [--watch]`: time lag as a live table.

Reads ``GET /v1/lag`` from the control plane (its lag monitor follows every cluster's
``__consumer_offsets``). Without ``--group`` it prints one line per group; with it, one
line per partition plus the group's total. ``--watch`` redraws every ``--interval``
seconds until interrupted (Ctrl-C exits quietly), and keeps trying while the control
plane does not answer.

An unknown ``--stream`` is an error (the API answers 404). So is ``--group`` with no
tracked partition (without ``--watch``): one ``error:`` line and exit code 1. The API
itself does not call an untracked group an error (the monitor may not have seen its
commits yet), which is what ``--watch`` shows until they arrive. An empty ``--group`` or
``--stream`` is a usage error (exit code 2), like the API's 422.

A group's offset lag and time lag cover its partitions whose lag is known; partitions
whose lag is unknown (a cluster down before the monitor learnt where they start) are
shown beside them, e.g. ``0 (4 unknown)``: such a group is not caught up as far as
anyone knows. Partitions whose end offset could not be read lately (a broker down, a
leader moving) count at their last known end, and the total says so, e.g.
``5356 (2 stale)``; their END shows its age (``1150 (stale 12s)``), and with ``--group``
a line under the total names them (``2 partitions stale: ...``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import click

from streamplane.cli.connection import connect, connection_options, echo_json, json_option
from streamplane.cli.output import table
from streamplane.exceptions import ControlPlaneUnavailable, NotFound

_CLEAR = "\x1b[H\x1b[2J"


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.1f}s"
    if value < 3600:
        return f"{value / 60:.1f}m"
    return f"{value / 3600:.1f}h"


def _int(value: object) -> str:
    return "-" if value is None else str(value)


def _with_unknown(known: str, unknown: int, stale: int = 0) -> str:
    """A group's lag over its known partitions, and how many partitions are unknown (not
    in it) or stale (in it at their last known end offset)."""
    notes = [f"{n} {what}" for n, what in ((unknown, "unknown"), (stale, "stale")) if n]
    return f"{known} ({', '.join(notes)})" if notes else known


def group_lags(g: Mapping[str, Any]) -> tuple[str, str]:
    """(offset lag, time lag) of a ``/v1/lag`` group, with its unknown and stale
    partitions (a stale end offset makes the offset lag a lower bound, not the time lag:
    that counts from the committed record's timestamp)."""
    return (
        _with_unknown(
            str(g["offset_lag"]), g.get("unknown_offset_lag", 0), g.get("stale_end_offsets", 0)
        ),
        _with_unknown(seconds(g["max_time_lag_s"]), g.get("unknown_time_lag", 0)),
    )


def stale_note(g: Mapping[str, Any]) -> str | None:
    """The line saying a group's total counts stale end offsets (None when none is)."""
    n = g.get("stale_end_offsets", 0)
    if not n:
        return None
    age = g.get("stale_end_offset_age_s")
    old = f", up to {seconds(age)} old" if age is not None else ""
    return (
        f"{n} partition{'s' if n != 1 else ''} stale: end offset not read at the last poll"
        f"{old}; the offset lag counts the last known end (a lower bound)"
    )


def _end(p: Mapping[str, Any]) -> str:
    """A partition's end offset, with its age when it is stale."""
    end = _int(p["end_offset"])
    if not p.get("end_offset_stale"):
        return end
    age = p.get("end_offset_age_s")
    return f"{end} (stale {seconds(age)})" if age is not None else f"{end} (stale)"


def _not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value:
        raise click.BadParameter("must not be empty", ctx=ctx, param=param)
    return value


def no_partitions(group: str, stream: str | None) -> str:
    if stream:
        return f"group {group!r}: no tracked partitions of stream {stream!r}"
    return f"group {group!r}: no tracked partitions (no commit of it seen on any cluster)"


def render(doc: Mapping[str, Any], group: str | None, stream: str | None = None) -> str:
    """The table for one ``/v1/lag`` document (pure: tested without a server)."""
    if not doc.get("monitor", True):
        return "the control plane's lag monitor is off (lag_monitor = false)"
    groups: Sequence[Mapping[str, Any]] = doc.get("groups", [])
    if group is None:
        if not groups:
            return "no committed offsets seen yet"
        rows = [
            [
                g["group"],
                ",".join(g["streams"]) or "-",
                ",".join(g["clusters"]),
                g["partitions"],
                *group_lags(g),
                g["status"],
            ]
            for g in groups
        ]
        headers = ["GROUP", "STREAMS", "CLUSTERS", "PARTITIONS", "OFFSET LAG", "TIME LAG"]
        return table([*headers, "STATUS"], rows)
    parts: Sequence[Mapping[str, Any]] = doc.get("partitions", [])
    if not parts:
        return no_partitions(group, stream)
    rows = [
        [
            p["cluster"],
            p["stream"] or "-",
            p["lane"] or "-",
            p["topic"],
            p["partition"],
            _int(p["committed_offset"]),
            _end(p),
            _int(p["offset_lag"]),
            seconds(p["time_lag_s"]),
            p["status"],
        ]
        for p in parts
    ]
    headers = ["CLUSTER", "STREAM", "LANE", "TOPIC", "PART", "COMMITTED", "END", "OFFSET LAG"]
    out = table([*headers, "TIME LAG", "STATUS"], rows)
    if groups:
        g = groups[0]
        offset_lag, time_lag = group_lags(g)
        out += (
            f"\n\ngroup {g['group']}: offset lag {offset_lag}, time lag {time_lag}, {g['status']}"
        )
        note = stale_note(g)
        if note is not None:
            out += f"\n{note}"
    return out


@click.command("lag")
@click.option(
    "--group", "-g", default=None, callback=_not_empty, help="One group: a line per partition."
)
@click.option(
    "--stream", "-s", default=None, callback=_not_empty, help="Only partitions of this stream."
)
@click.option("--watch", "-w", is_flag=True, help="Redraw until interrupted.")
@click.option(
    "--interval",
    type=click.FloatRange(0.2, 3600),
    default=1.0,
    show_default=True,
    help="Seconds between redraws with --watch.",
)
@connection_options
@json_option
def lag(
    url: str,
    token: str | None,
    group: str | None,
    stream: str | None,
    watch: bool,
    interval: float,
    as_json: bool,
) -> None:
    """Time lag in seconds (and offset lag, status) of consumer groups, across clusters."""
    with connect(url, token) as cp:
        while True:
            try:
                doc = cp.lag(group, stream)
            except ControlPlaneUnavailable as exc:
                if not watch:
                    raise
                # --watch rides through a control-plane restart: say so, try again.
                text = f"{exc}; trying again every {interval:g}s"
            else:
                # An unknown stream is the API's 404 (NotFound, raised above). A group with
                # nothing tracked is not an error to the API; asked for by name, it is here.
                if (
                    group is not None
                    and not watch
                    and doc.get("monitor", True)
                    and not doc.get("partitions")
                ):
                    raise NotFound(no_partitions(group, stream))
                if as_json:
                    echo_json(doc)
                    text = ""
                else:
                    text = render(doc, group, stream)
            if text:
                if watch:
                    stamp = time.strftime("%H:%M:%S")
                    head = f"streamplane lag  {stamp}  (every {interval:g}s, Ctrl-C quits)"
                    text = f"{_CLEAR}{head}\n\n{text}"
                click.echo(text)
            if not watch:
                return
            try:
                time.sleep(interval)
            except KeyboardInterrupt:
                return
