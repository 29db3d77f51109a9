"""`streamplane dlq ...`: inspect and replay a stream's dlq lane."""

from __future__ import annotations

import json

import click

from streamplane.cli.connection import connect, connection_options, json_option
from streamplane.cli.output import progress, table
from streamplane.client.dlq import (
    DeadLetter,
    describe_unread,
    list_dead_letters,
    replay_dead_letters,
)
from streamplane.core.text import counted
from streamplane.exceptions import KafkaError


@click.group("dlq")
def dlq() -> None:
    """The dlq lane: records that were rejected, with their provenance."""


@dlq.command("list")
@click.argument("stream")
@click.option("--limit", type=int, default=50, show_default=True, help="At most this many.")
@connection_options
@json_option
def list_cmd(stream: str, limit: int, url: str, token: str | None, as_json: bool) -> None:
    """List dead-lettered records of STREAM, oldest first (commits nothing)."""
    if limit < 1:
        raise click.BadParameter("must be at least 1", param_hint="--limit")
    with connect(url, token) as client:
        listing = list_dead_letters(client, stream, limit=limit)
    letters = listing.letters
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "topic": d.topic,
                        "partition": d.partition,
                        "offset": d.offset,
                        "key": d.key.decode(errors="replace") if d.key else None,
                        "value": d.value.decode(errors="replace") if d.value else None,
                        "provenance": _typed(d.provenance),
                    }
                    for d in letters
                ],
                indent=2,
            )
        )
    else:
        _print_table(letters, limit if listing.more else None)
    if listing.unread:
        raise KafkaError(
            f"the listing is incomplete: {describe_unread(listing.unread)} (the cluster "
            "does not answer)"
        )


# Provenance fields that are numbers (headers are bytes: read back as text).
_NUMERIC = frozenset({"partition", "offset", "attempts", "first-seen-ms", "dropped"})


def _typed(provenance: dict[str, str]) -> dict[str, str | int]:
    """Provenance with its numeric fields as numbers (``"offset": 328``, not ``"328"``)."""
    return {
        k: int(v) if k in _NUMERIC and v.lstrip("-").isdigit() else v for k, v in provenance.items()
    }


def _print_table(letters: list[DeadLetter], limit: int | None) -> None:
    """``limit``: the listing stopped there, with more records after it."""
    rows = [
        [
            f"{d.topic}[{d.partition}]@{d.offset}",
            d.provenance.get("lane", "?"),
            f"{d.provenance.get('topic', '?')}[{d.provenance.get('partition', '?')}]"
            f"@{d.provenance.get('offset', '?')}",
            d.provenance.get("attempts", "?"),
            d.provenance.get("error", "")[:60]
            + (
                f" (record not kept: {d.provenance['dropped']} bytes)"
                if "dropped" in d.provenance
                else ""
            ),
        ]
        for d in letters
    ]
    click.echo(table(["dlq record", "lane", "origin", "attempts", "error"], rows))
    if limit is None:
        click.echo(counted(len(letters), "record"))
    else:
        click.echo(f"the first {counted(limit, 'record')}: more follow (--limit N shows more)")


@dlq.command("replay")
@click.argument("stream")
@click.option("--to-lane", default=None, help="Target lane (default: the lane each came from).")
@connection_options
def replay_cmd(stream: str, to_lane: str | None, url: str, token: str | None) -> None:
    """Send the dlq records of STREAM back to a lane; resumable (group sp-dlq-replay).

    Replays the dead letters present when it starts: those that arrive meanwhile are
    left for the next replay."""
    with connect(url, token) as client:
        result = replay_dead_letters(
            client, stream, to_lane=to_lane, progress=lambda k: progress(f"{k} replayed")
        )
    line = f"replayed {counted(result.replayed, 'record')}"
    if result.newer:
        line += f"; {counted(result.newer, 'newer dead letter')} left for the next replay"
    click.echo(line)
