"""`streamplane dlq ...`: inspect and replay a stream's dlq lane."""

from __future__ import annotations

import base64
import json

import click

from streamplane.cli.connection import connect, connection_options, json_option
from streamplane.cli.output import progress, table
from streamplane.client.dlq import (
    DeadLetter,
    describe_unreadable,
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
    """List dead-lettered records of STREAM, oldest first (commits nothing): every one
    still in Kafka, those of dlq segments a failover left behind and since retired
    included (marked "(retired)": `dlq replay` does not send them).

    With --json, a key or value is its text when it is valid UTF-8 ("" when empty, null
    when the record has none); any other bytes are given exactly, in base64, as
    "key_base64" or "value_base64" instead. "headers" lists the record's own headers
    (the sp-dlq-* ones are its "provenance") as {"name", "value"} objects in order, each
    value given as a key's is; "replayed_from" is the dead letter a replayed copy came
    from (its sp-replayed-from header), else null; "origin" is the original record
    (cluster:topic:partition:offset) its replayed copy would carry as sp-origin, the
    same for every dead letter of one record; "cluster" is where its topic is, and
    "retired" whether its segment is retired. The JSON is a list of the records; when
    more follow past --limit, stderr says so. The table marks a replayed copy's origin
    "(replayed)"."""
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
                        "cluster": d.cluster,
                        "topic": d.topic,
                        "partition": d.partition,
                        "offset": d.offset,
                        **_bytes_field("key", d.key),
                        **_bytes_field("value", d.value),
                        "provenance": _typed(d.provenance),
                        "headers": [{"name": k, **_bytes_field("value", v)} for k, v in d.headers],
                        "replayed_from": d.replayed_from,
                        "origin": d.origin,
                        "retired": d.retired,
                    }
                    for d in letters
                ],
                indent=2,
            )
        )
        if listing.more:  # (stdout stays the list it always was)
            click.echo(_more_follow(limit), err=True)
    else:
        _print_table(letters, limit if listing.more else None)
    if listing.unread:
        why = "the cluster does not answer"
        raise KafkaError(
            "the listing is incomplete: "
            f"{describe_unreadable(listing.unread, listing.missing, why)}"
        )


def _more_follow(limit: int) -> str:
    """What ``dlq list`` says when it stopped at ``limit`` with more records after it."""
    return f"the first {counted(limit, 'record')}: more follow (--limit N shows more)"


def _bytes_field(name: str, data: bytes | None) -> dict[str, str | None]:
    """A key or value for JSON, so that its exact bytes can be had back: ``{name: text}``
    when it is valid UTF-8 (``""`` when empty), ``{name: None}`` when the record has
    none, else ``{name + "_base64": ...}`` (before, bytes that were not UTF-8 came out
    with U+FFFD in place of each bad one, and an empty key or value as null)."""
    if data is None:
        return {name: None}
    try:
        return {name: data.decode()}
    except UnicodeDecodeError:
        return {f"{name}_base64": base64.b64encode(data).decode("ascii")}


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
            _where(d),
            d.cluster,
            "-",
            "(no provenance: written to the dlq lane directly)" + _replayed(d),
            "-",
            "",
        ]
        if not d.provenance
        else [
            _where(d),
            d.cluster,
            _one_line(d.provenance.get("lane", "?")),
            _one_line(
                f"{d.provenance.get('topic', '?')}[{d.provenance.get('partition', '?')}]"
                f"@{d.provenance.get('offset', '?')}"
            )
            + _replayed(d),
            _one_line(d.provenance.get("attempts", "?")),
            _one_line(d.provenance.get("error", "")[:60])
            + (
                f" (record not kept: {_one_line(d.provenance['dropped'])} bytes)"
                if "dropped" in d.provenance
                else ""
            ),
        ]
        for d in letters
    ]
    click.echo(table(["dlq record", "cluster", "lane", "origin", "attempts", "error"], rows))
    if limit is None:
        click.echo(counted(len(letters), "record"))
    else:
        click.echo(_more_follow(limit))


def _where(d: DeadLetter) -> str:
    """The table's dlq record: ``topic[partition]@offset``, marked ``(retired)`` when its
    segment is retired (`dlq replay` does not send it)."""
    return f"{d.topic}[{d.partition}]@{d.offset}" + (" (retired)" if d.retired else "")


def _replayed(d: DeadLetter) -> str:
    """The table's mark on a dead letter that is a replayed copy (``sp-replayed-from``):
    a replay sent it back and it was rejected again (``--json`` says from which)."""
    return " (replayed)" if d.replayed_from is not None else ""


# Control characters (line breaks among them) in a table cell, escaped: an error
# reason with a newline started a row of its own.
_ESCAPES = {
    c: {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(chr(c), f"\\x{c:02x}")
    for c in (*range(0x20), *range(0x7F, 0xA0))
} | {0x2028: "\\u2028", 0x2029: "\\u2029"}


def _one_line(text: str) -> str:
    """``text`` on one line, for a table cell: control characters escaped (``\\n``)."""
    return text.translate(_ESCAPES)


@dlq.command("replay")
@click.argument("stream")
@click.option(
    "--to-lane",
    default=None,
    help="Target lane (default: the lane each came from; the stream's first lane for a "
    "record without provenance, or from a lane the stream no longer has).",
)
@connection_options
def replay_cmd(stream: str, to_lane: str | None, url: str, token: str | None) -> None:
    """Send the dlq records of STREAM back to a lane; resumable.

    Replays the dead letters present when it starts: those that arrive meanwhile are
    left for the next replay.

    Group: sp-dlq-replay.STREAM, one per stream (replays of different streams run at
    the same time)."""
    with connect(url, token) as client:
        result = replay_dead_letters(
            client, stream, to_lane=to_lane, progress=lambda k: progress(f"{k} replayed")
        )
    line = f"replayed {counted(result.replayed, 'record')}"
    if result.newer:
        line += f"; {counted(result.newer, 'newer dead letter')} left for the next replay"
    click.echo(line)
