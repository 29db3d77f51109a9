"""`streamplane streams ...`: create, inspect, move and delete streams, add lanes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from streamplane.cli.connection import (
    connect,
    connection_options,
    echo_json,
    json_option,
    parse_key_values,
)
from streamplane.cli.output import table
from streamplane.core.replication import MIN_INSYNC_REPLICAS
from streamplane.core.routing import (
    DEFAULT_LANES,
    RoutingTable,
    SegmentState,
    routing_from_json,
    routing_to_json,
)
from streamplane.exceptions import ControlPlaneError


@click.group("streams")
def streams() -> None:
    """Streams: stable names with priority lanes, routed to topics on clusters."""


def segments_table(table_: RoutingTable) -> str:
    order = {lane: i for i, lane in enumerate(table_.all_lanes)}
    segs = sorted(table_.segments, key=lambda s: (order.get(s.lane, len(order)), s.epoch))
    return table(
        ["lane", "state", "cluster", "topic", "partitions", "epoch"],
        [[s.lane, s.state.value, s.cluster, s.topic, s.partitions, s.epoch] for s in segs],
    )


def _lanes(value: str) -> tuple[str, ...]:
    """The lanes of ``--lanes`` (comma-separated, spaces around names ignored). An empty
    name (``a,,b``, a trailing comma) is refused: it was dropped without a word."""
    lanes = tuple(x.strip() for x in value.split(","))
    if lanes == ("",):
        raise click.BadParameter("give at least one lane", param_hint="--lanes")
    if "" in lanes:
        raise click.BadParameter(
            f"{value!r} has an empty lane name (two commas in a row, or one at an end)",
            param_hint="--lanes",
        )
    return lanes


@streams.command("create")
@click.argument("name")
@click.option("--cluster", required=True, help="The cluster that gets the stream's topics.")
@click.option(
    "--lanes",
    default=",".join(DEFAULT_LANES),
    show_default=True,
    help="Lanes in priority order, comma-separated (the dlq lane is added).",
)
@click.option("--partitions", type=int, default=6, show_default=True, help="Per lane.")
@click.option("--dlq-partitions", type=int, default=1, show_default=True)
@click.option(
    "--replication-factor",
    type=int,
    default=None,
    help="Replicas of every topic.  [default: the control plane's, min(3, brokers)]",
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Topic config for every topic (repeatable), e.g. retention.ms=86400000.",
)
@click.option(
    "--max-record-bytes",
    type=int,
    default=1_048_576,
    show_default=True,
    help="Largest record (key + value) the stream accepts.",
)
@json_option
@connection_options
def create(
    name: str,
    cluster: str,
    lanes: str,
    partitions: int,
    dlq_partitions: int,
    replication_factor: int | None,
    configs: tuple[str, ...],
    max_record_bytes: int,
    as_json: bool,
    url: str,
    token: str | None,
) -> None:
    """Create stream NAME: a topic per lane plus the dlq lane's, on --cluster."""
    with connect(url, token) as cp:
        routing = cp.create_stream(
            name,
            cluster,
            lanes=_lanes(lanes),
            partitions=partitions,
            dlq_partitions=dlq_partitions,
            replication_factor=replication_factor,
            config=parse_key_values(configs, "--config"),
            max_record_bytes=max_record_bytes,
        )
        if as_json:  # the same document as `streams describe --json`
            echo_json(cp.describe_stream(name))
            return
    click.echo(f"created stream {name} on {cluster} (epoch {routing.epoch})")
    click.echo(segments_table(routing))


@streams.command("list")
@json_option
@connection_options
def list_(as_json: bool, url: str, token: str | None) -> None:
    """List streams: lanes, epoch, where their active segments are."""
    with connect(url, token) as cp:
        rows = cp.list_streams()
    if as_json:
        echo_json(rows)
        return
    click.echo(
        table(
            ["stream", "lanes", "partitions", "epoch", "active on"],
            [
                [
                    s["name"],
                    ",".join(s["lanes"]),
                    s["partitions"],
                    s["epoch"],
                    ",".join(s["active_clusters"]) or "-",
                ]
                for s in rows
            ],
        )
    )


# The audit actions that create a stream's topics; their entries hold the replication
# the topics were made with (a failover's and a lane's are capped at the live brokers).
_MAKES_TOPICS = ("stream.create", "stream.failover", "lane.add")


def active_replication_notes(
    doc: Mapping[str, Any], routing: RoutingTable, audit: Sequence[Mapping[str, Any]]
) -> list[str]:
    """One line per cluster whose active segments' topics were made with another
    replication factor or ``min.insync.replicas`` than the stream's own (``doc``, as
    ``streams describe`` reads it): a failover, or a lane added, to a cluster with fewer
    live brokers capped both. Read from the audit entries that made those topics
    (``audit``, newest first); a segment whose entry is not among them is not told."""
    own = _own_replication(doc)
    made: dict[str, tuple[int, str, int | None]] = {}
    for entry in audit:
        detail = entry["detail"]
        if entry["action"] not in _MAKES_TOPICS or "replication_factor" not in detail:
            continue
        min_insync = detail.get("min_insync_replicas")
        replication = (
            int(detail["replication_factor"]),
            own[1] if min_insync is None else str(min_insync),
            detail.get("live_brokers"),
        )
        for topic in detail.get("topics") or [detail.get("topic")]:
            made.setdefault(str(topic), replication)  # the newest entry that made it
    capped: dict[tuple[str, int, str, int | None], list[str]] = {}
    for segment in routing.segments:
        found = made.get(segment.topic)
        if segment.state is SegmentState.ACTIVE and found and found[:2] != own:
            capped.setdefault((segment.cluster, *found), []).append(segment.topic)
    return [
        f"{', '.join(topics)} on {cluster}: "
        + replication_text(cluster, replicas, min_insync, own, live)
        for (cluster, replicas, min_insync, live), topics in sorted(capped.items())
    ]


def failover_warning(
    doc: Mapping[str, Any], audit: Sequence[Mapping[str, Any]], epoch: int
) -> str | None:
    """The warning for the failover that made ``epoch`` when its new topics got less
    replication than the stream's own (``doc``): capped at the target cluster's live
    brokers, as the failover's audit entry says. None when they got the stream's."""
    own = _own_replication(doc)
    for entry in audit:
        detail = entry["detail"]
        if entry["action"] != "stream.failover" or detail.get("to_epoch") != epoch:
            continue
        replicas = int(detail["replication_factor"])
        min_insync = str(detail["min_insync_replicas"])
        if (replicas, min_insync) == own:
            return None
        cluster = str(detail["cluster"])
        live = detail.get("live_brokers")
        return (
            f"the new topics on {cluster} have "
            f"{replication_text(cluster, replicas, min_insync, own, live)}; they keep it "
            "when the brokers are back (the stream's next move gets its own again)"
        )
    return None


def replication_text(
    cluster: str, replicas: int, min_insync: str, own: tuple[int, str], live: int | None
) -> str:
    """``replication factor 2, min.insync.replicas=1, not the stream's 3 and 2 (local-b
    had 2 live brokers)``."""
    why = f" ({cluster} had {live} live brokers)" if live is not None else ""
    return (
        f"replication factor {replicas}, {MIN_INSYNC_REPLICAS}={min_insync}, not the "
        f"stream's {own[0]} and {own[1]}{why}"
    )


def _own_replication(doc: Mapping[str, Any]) -> tuple[int, str]:
    """The stream's own replication factor and ``min.insync.replicas`` (``doc``: as
    ``streams describe`` reads it)."""
    return int(doc["replication_factor"]), str(doc["topic_config"].get(MIN_INSYNC_REPLICAS))


def describe_text(
    doc: dict[str, Any], routing: RoutingTable, audit: Sequence[Mapping[str, Any]] = ()
) -> str:
    configs = ", ".join(f"{k}={v}" for k, v in sorted(doc["topic_config"].items()))
    lines = [
        f"stream       {doc['name']}",
        f"lanes        {' > '.join(routing.all_lanes)}  (priority order)",
        f"epoch        {routing.epoch}",
        f"partitions   {doc['partitions']} per lane, {doc['dlq_partitions']} for the dlq; "
        f"replication factor {doc['replication_factor']}",
        f"max record   {doc['max_record_bytes']} bytes",
        f"topic config {configs}",
        *(f"active       {note}" for note in active_replication_notes(doc, routing, audit)),
        f"created      {doc['created_at']}",
        "",
        segments_table(routing),
    ]
    return "\n".join(lines)


@streams.command("describe")
@click.argument("name")
@json_option
@connection_options
def describe(name: str, as_json: bool, url: str, token: str | None) -> None:
    """A stream's settings and its routing table (every segment)."""
    with connect(url, token) as cp:
        doc = cp.describe_stream(name)
        audit = [] if as_json else cp.audit(name)
    if as_json:
        echo_json(doc)
        return
    click.echo(describe_text(doc, routing_from_json(doc["routing"]), audit))


@streams.command("delete")
@click.argument("name")
@click.option("--keep-topics", is_flag=True, help="Forget the stream but leave its topics.")
@connection_options
def delete(name: str, keep_topics: bool, url: str, token: str | None) -> None:
    """Delete a stream and (unless --keep-topics) its topics on every cluster."""
    with connect(url, token) as cp:
        cp.delete_stream(name, delete_topics=not keep_topics)
    click.echo(f"deleted stream {name}" + (" (topics kept)" if keep_topics else ""))


@streams.command("failover")
@click.argument("name")
@click.option("--to", "--cluster", "cluster", required=True, help="The target cluster.")
@click.option(
    "--lane", "lanes", multiple=True, help="A lane to move (repeatable; default: all but dlq)."
)
@click.option("--partitions", type=int, default=None, help="Partitions of the new segments.")
@click.option("--reason", default="", help="Why, for the audit log.")
@json_option
@connection_options
def failover(
    name: str,
    cluster: str,
    lanes: tuple[str, ...],
    partitions: int | None,
    reason: str,
    as_json: bool,
    url: str,
    token: str | None,
) -> None:
    """Move lanes to new topics on another cluster, live: old segments drain."""
    with connect(url, token) as cp:
        routing = cp.failover(name, cluster, list(lanes) or None, partitions, reason)
        try:  # the failover is done: reading it back is no reason to fail the command
            warning = failover_warning(cp.describe_stream(name), cp.audit(name), routing.epoch)
        except ControlPlaneError as exc:
            warning = f"the new topics' replication could not be read back: {exc}"
    if warning:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        echo_json(routing_to_json(routing))
        return
    click.echo(f"stream {name} now at epoch {routing.epoch}")
    click.echo(segments_table(routing))


@streams.command("add-lane")
@click.argument("name")
@click.argument("lane")
@click.option(
    "--before",
    default=None,
    metavar="LANE",
    help="Put it just above LANE in the priority order.  [default: last, above the dlq]",
)
@click.option(
    "--partitions", type=int, default=None, help="Partitions of its topic.  [default: the stream's]"
)
@click.option(
    "--cluster",
    default=None,
    help="Where its topic goes.  [default: the cluster of the other lanes' active segments]",
)
@json_option
@connection_options
def add_lane(
    name: str,
    lane: str,
    before: str | None,
    partitions: int | None,
    cluster: str | None,
    as_json: bool,
    url: str,
    token: str | None,
) -> None:
    """Add LANE to live stream NAME, in a new epoch: producers and consumers watching the
    routing pick it up without a restart."""
    with connect(url, token) as cp:
        routing = cp.add_lane(name, lane, before=before, partitions=partitions, cluster=cluster)
    if as_json:
        echo_json(routing_to_json(routing))
        return
    click.echo(f"stream {name}: lane {lane} added (epoch {routing.epoch})")
    click.echo(f"lanes: {' > '.join(routing.all_lanes)}  (priority order)")
    click.echo(segments_table(routing))


@streams.command("segments")
@click.argument("name")
@json_option
@connection_options
def segments(name: str, as_json: bool, url: str, token: str | None) -> None:
    """Every segment of a stream: state, end offsets once sealed, groups that drained it."""
    with connect(url, token) as cp:
        doc = cp.segments(name)
    if as_json:
        echo_json(doc)
        return
    rows = []
    for s in doc["segments"]:  # by lane priority, then epoch
        ends = s["sealed_end_offsets"]
        rows.append(
            [
                s["lane"],
                s["state"],
                s["cluster"],
                s["topic"],
                s["partitions"],
                s["epoch"],
                sum(ends.values()) if ends else "-",
                ",".join(s["drained_by"]) or "-",
            ]
        )
    click.echo(f"stream {name} at epoch {doc['epoch']}")
    click.echo(
        table(
            [
                "lane",
                "state",
                "cluster",
                "topic",
                "partitions",
                "epoch",
                "sealed end",
                "drained by",
            ],
            rows,
        )
    )
    producers = doc["producers"]
    live = ", ".join(f"{p}@{e}" for p, e in sorted(producers.items())) or "none"
    click.echo(f"live producers (id@epoch): {live}")


@streams.command("declare-lost")
@click.argument("name")
@click.option("--cluster", required=True, help="The dead cluster.")
@click.option("--reason", default="", help="Why, for the audit log.")
@json_option
@connection_options
def declare_lost(
    name: str, cluster: str, reason: str, as_json: bool, url: str, token: str | None
) -> None:
    """Declare the draining and sealed segments of NAME on a dead cluster lost."""
    with connect(url, token) as cp:
        routing = cp.declare_lost(name, cluster, reason)
    if as_json:
        echo_json(routing_to_json(routing))
        return
    click.echo(f"stream {name}: segments on {cluster} declared lost (epoch {routing.epoch})")
    click.echo(segments_table(routing))


@streams.command("transition")
@click.argument("name")
@click.argument("topic")
@click.option("--cluster", required=True, help="The segment's cluster.")
@click.option(
    "--to",
    "state",
    required=True,
    type=click.Choice(["sealed", "retired"]),
    help="The next state: a draining segment is sealed (no producer writes to it; no end "
    "offsets are recorded: the retire check reads its current ends), a sealed one "
    "retired (no longer read).",
)
@json_option
@connection_options
def transition(
    name: str, topic: str, cluster: str, state: str, as_json: bool, url: str, token: str | None
) -> None:
    """Move segment TOPIC of stream NAME forward by hand: what the sealer does on its own,
    for a stream no group reads (never retired automatically)."""
    with connect(url, token) as cp:
        routing = cp.transition_segment(name, cluster, topic, state)
    if as_json:
        echo_json(routing_to_json(routing))
        return
    click.echo(f"stream {name}: {topic} on {cluster} {state} (epoch {routing.epoch})")
    click.echo(segments_table(routing))
