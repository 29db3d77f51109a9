"""`streamplane groups list|describe`: consumer groups as the Assigner holds them.

Reads ``GET /v1/assigner/groups`` and ``GET /v1/groups/{group}/members`` (served by the
leader's Assigner; a follower forwards them). The Assigner knows a group from its
members' heartbeats: a group none of whose members has heartbeated since the control
plane started (or its replica became the leader) is unknown, one ``error:`` line and
exit code 1. In the Assigner's recovery window (after a start or a change of leader)
``describe`` shows the members heard so far with the units each claims, the units none
claims and when the window ends. Time lag is ``streamplane lag``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import click

from streamplane.cli.connection import connect, connection_options, echo_json, json_option
from streamplane.cli.lag import seconds
from streamplane.cli.output import table


def recovering_note(ends_s: float | None) -> str:
    """What the Assigner does with a group in its recovery window, and when it ends
    (``ends_s`` None: not said, as by a control plane older than the field)."""
    start = "recovering: the Assigner has just started (or become the leader)"
    if ends_s is None or ends_s > 0:
        return (
            f"{start}; {'' if ends_s is None else f'for {seconds(ends_s)} more '}it answers "
            "each member with the units it claims, then rebuilds the group from those "
            "claims and balances it"
        )
    return (
        f"{start}; its recovery window is over: the group's next heartbeat rebuilds it "
        "from these claims and balances it"
    )


@click.group("groups")
def groups() -> None:
    """Consumer groups as the Assigner holds them: members, their load, their units."""


def compact_units(units: Iterable[str]) -> str:
    """``cluster/topic/partition`` units as one line, partitions grouped by topic into
    ranges: ``local-a/sp.s.realtime.e1 0-3,5; local-b/sp.s.bulk.e2 1``; ``-`` for none."""
    by_topic: dict[str, list[int]] = {}
    for unit in units:
        topic, _, partition = unit.rpartition("/")
        by_topic.setdefault(topic, []).append(int(partition))
    return "; ".join(f"{t} {_ranges(sorted(ps))}" for t, ps in sorted(by_topic.items())) or "-"


def _ranges(partitions: list[int]) -> str:
    spans: list[list[int]] = []
    for p in partitions:
        if spans and p == spans[-1][1] + 1:
            spans[-1][1] = p
        else:
            spans.append([p, p])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def groups_table(rows: Sequence[Mapping[str, Any]]) -> str:
    return table(
        ["group", "stream", "lanes", "members", "units", "unowned", "generation"],
        [
            [
                g["group"],
                g["stream"],
                ",".join(g["lanes"]),
                g["members"],
                g["units"],
                g["unowned"],
                f"{g['generation']} (recovering)" if g["recovering"] else g["generation"],
            ]
            for g in rows
        ],
    )


def describe_text(doc: Mapping[str, Any]) -> str:
    """The group as ``groups describe`` prints it. While the Assigner is recovering, the
    members are those heard so far and their units the ones they claim."""
    if doc["recovering"]:
        return _recovering_text(doc)
    pending = doc["pending_release"]
    lines = [
        *_heading(doc),
        f"units       {doc['units']} ({len(doc['unowned'])} unowned, "
        f"{len(pending)} pending release)",
        "",
    ]
    if doc["members"]:
        lines.append(
            table(
                ["member", "cpu", "records/s", "lease left", "units", "releasing", "holds"],
                [
                    [*_member_cells(m), len(m["releasing"]), compact_units(m["units"])]
                    for m in doc["members"]
                ],
            )
        )
    else:
        lines.append("members: none holding a lease")
    if pending:
        lines += [
            "",
            "pending release (the holder stops the unit, then it moves on):",
            table(
                ["unit", "holder", "to", "lease left"],
                [
                    [
                        p["unit"],
                        p["holder"],
                        p["target"] or "- (none yet)",
                        seconds(p["deadline_s"]),
                    ]
                    for p in pending
                ],
            ),
        ]
    if doc["unowned"]:
        lines += ["", f"unowned: {compact_units(doc['unowned'])}"]
    return "\n".join(lines)


def _recovering_text(doc: Mapping[str, Any]) -> str:
    lines = [
        *_heading(doc),
        f"units       {doc['units']} ({len(doc['unowned'])} unclaimed)",
        recovering_note(doc.get("recovery_ends_s")),
        "",
    ]
    if doc["members"]:
        lines += [
            "members heard so far, with the units each claims:",
            table(
                ["member", "cpu", "records/s", "lease left", "units", "claims"],
                [[*_member_cells(m), compact_units(m["units"])] for m in doc["members"]],
            ),
        ]
    else:
        lines.append("members: none heard yet")
    if doc["unowned"]:
        lines += ["", f"unclaimed: {compact_units(doc['unowned'])}"]
    return "\n".join(lines)


def _heading(doc: Mapping[str, Any]) -> list[str]:
    return [
        f"group       {doc['group']}",
        f"stream      {doc['stream']} (lanes {' > '.join(doc['lanes'])})",
        f"generation  {doc['generation']}",
    ]


def _member_cells(member: Mapping[str, Any]) -> list[Any]:
    return [
        member["member_id"],
        f"{member['cpu']:.0%}",
        f"{member['records_per_s']:.1f}",
        seconds(member["lease_s"]),
        len(member["units"]),
    ]


@groups.command("list")
@json_option
@connection_options
def list_(as_json: bool, url: str, token: str | None) -> None:
    """Every group the Assigner knows: stream, lanes, members, units, generation."""
    with connect(url, token) as cp:
        rows = cp.assigner_groups()
    if as_json:
        echo_json(rows)
    elif not rows:
        click.echo("no groups (the Assigner knows a group once one of its members heartbeats)")
    else:
        click.echo(groups_table(rows))


@groups.command("describe")
@click.argument("group")
@json_option
@connection_options
def describe(group: str, as_json: bool, url: str, token: str | None) -> None:
    """GROUP's members (CPU, records/s, lease left, units held), the units being released
    and to whom, and the units no member holds. While the Assigner is recovering (just
    started, or become the leader): the members heard so far, the units each claims, the
    units none claims and when the recovery window ends."""
    with connect(url, token) as cp:
        doc = cp.describe_group(group)
    if as_json:
        echo_json(doc)
    else:
        click.echo(describe_text(doc))
