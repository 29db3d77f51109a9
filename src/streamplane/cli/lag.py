"""`streamplane lag [--group G] [--stream S] [--watch]`: time lag as a live table.

Reads ``GET /v1/lag`` from the control plane (its lag monitor follows every cluster's
``__consumer_offsets``). Without ``--group`` it prints one line per group; with it, one
line per partition plus the group's total. ``--watch`` redraws every ``--interval``
seconds until interrupted (Ctrl-C exits quietly), and keeps trying while the control
plane does not answer.

An unknown ``--stream`` is an error (the API answers 404). So is ``--group`` with no
tracked partition (without ``--watch``): one ``error:`` line and exit code 1. The API
itself does not call an untracked group an error (the monitor may not have seen its
commits yet), which is what ``--watch`` shows until they arrive.
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
                g["offset_lag"],
                seconds(g["max_time_lag_s"]),
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
            _int(p["end_offset"]),
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
        out += (
            f"\n\ngroup {g['group']}: offset lag {g['offset_lag']}, "
            f"time lag {seconds(g['max_time_lag_s'])}, {g['status']}"
        )
    return out


@click.command("lag")
@click.option("--group", "-g", default=None, help="One group: a line per partition.")
@click.option("--stream", "-s", default=None, help="Only partitions of this stream.")
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
