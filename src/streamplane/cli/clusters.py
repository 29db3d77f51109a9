"""`streamplane clusters ...`: the control plane's cluster registry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from streamplane.cli.connection import (
    LOCAL_TAGS,
    connect,
    connection_options,
    echo_json,
    format_tags,
    json_option,
    local_fleet_clusters,
    parse_key_values,
)
from streamplane.cli.local import data_dir_option
from streamplane.cli.output import table
from streamplane.client.control_plane import ControlPlaneClient, same_bootstrap
from streamplane.exceptions import Conflict

TAG_HELP = "A tag KEY=VALUE (repeatable)."


@click.group("clusters")
def clusters() -> None:
    """Register, tag and list the Kafka clusters the control plane knows."""


def health_cell(health: dict[str, Any] | None) -> str:
    """``ok``, ``unknown`` (not probed: health checks off), or the failing state with
    its latest error."""
    if not health:
        return "unknown"
    state = str(health.get("state", "unknown"))
    error = health.get("last_error")
    return f"{state}: {error}" if error and state != "ok" else state


def kafka_id_cell(cluster: dict[str, Any]) -> str:
    """The Kafka cluster id the name stands for; ``-`` while not known (not learnt yet)."""
    return cluster.get("kafka_cluster_id") or "-"


def clusters_table(rows: list[dict[str, Any]]) -> str:
    return table(
        ["cluster", "bootstrap", "kafka cluster id", "health", "tags"],
        [
            [
                c["name"],
                c["bootstrap"],
                kafka_id_cell(c),
                health_cell(c.get("health")),
                format_tags(c["tags"]),
            ]
            for c in rows
        ],
    )


def describe_text(doc: dict[str, Any]) -> str:
    health = doc.get("health") or {}
    since = f" (since {health['since']})" if health.get("since") else ""
    return "\n".join(
        [
            f"cluster          {doc['name']}",
            f"bootstrap        {doc['bootstrap']}",
            f"kafka cluster id {kafka_id_cell(doc)}"
            + ("" if doc.get("kafka_cluster_id") else "  (not known yet: learnt when it answers)"),
            f"health           {health_cell(health)}{since}",
            f"tags             {format_tags(doc['tags'])}",
            f"registered       {doc['created_at']}",
            f"updated          {doc['updated_at']}",
        ]
    )


@clusters.command("list")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Only clusters with it.")
@json_option
@connection_options
def list_(tags: tuple[str, ...], as_json: bool, url: str, token: str | None) -> None:
    """List registered clusters (every --tag must match)."""
    with connect(url, token) as cp:
        rows = cp.list_clusters(parse_key_values(tags, "--tag"))
    if as_json:
        echo_json(rows)
    else:
        click.echo(clusters_table(rows))


@clusters.command("describe")
@click.argument("name")
@json_option
@connection_options
def describe(name: str, as_json: bool, url: str, token: str | None) -> None:
    """One cluster: bootstrap, Kafka cluster id, health, tags."""
    with connect(url, token) as cp:
        doc = cp.get_cluster(name)
    if as_json:
        echo_json(doc)
    else:
        click.echo(describe_text(doc))


@clusters.command("add")
@click.argument("name")
@click.argument("bootstrap")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help=TAG_HELP)
@click.option(
    "--force",
    is_flag=True,
    help="Register it even if BOOTSTRAP does not answer or is a Kafka cluster registered "
    "under another name.",
)
@json_option
@connection_options
def add(
    name: str,
    bootstrap: str,
    tags: tuple[str, ...],
    force: bool,
    as_json: bool,
    url: str,
    token: str | None,
) -> None:
    """Register cluster NAME reachable at BOOTSTRAP (host:port[,host:port...]). BOOTSTRAP
    must answer and be a Kafka cluster (by cluster id) no other name is registered for,
    unless --force."""
    with connect(url, token) as cp:
        doc = cp.register_cluster(name, bootstrap, parse_key_values(tags, "--tag"), force)
    if as_json:
        echo_json(doc)
    else:
        click.echo(
            f"registered {doc['name']} ({doc['bootstrap']}, tags {format_tags(doc['tags'])})"
        )


@clusters.command("update")
@click.argument("name")
@click.option("--bootstrap", default=None, help="New bootstrap servers.")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Add or change a tag.")
@click.option("--remove-tag", "remove", multiple=True, metavar="KEY", help="Remove a tag.")
@click.option(
    "--force",
    is_flag=True,
    help="Change the bootstrap even if it does not answer or is another Kafka cluster.",
)
@json_option
@connection_options
def update(
    name: str,
    bootstrap: str | None,
    tags: tuple[str, ...],
    remove: tuple[str, ...],
    force: bool,
    as_json: bool,
    url: str,
    token: str | None,
) -> None:
    """Change a cluster's bootstrap servers and/or tags. A new bootstrap must answer
    and be the same Kafka cluster (its cluster id) unless --force."""
    changes = parse_key_values(tags, "--tag")
    if bootstrap is None and not changes and not remove:
        raise click.UsageError("nothing to change: give --bootstrap, --tag or --remove-tag")
    with connect(url, token) as cp:
        new_tags = None
        doc = None
        if changes or remove:
            doc = cp.get_cluster(name)
            current = dict(doc["tags"])
            for key in unset_tags(current, changes, remove):
                click.echo(f"warning: cluster {name} has no tag {key}: nothing removed", err=True)
            current.update(changes)
            new_tags = {k: v for k, v in current.items() if k not in remove}
        changed = doc is None or bootstrap is not None or new_tags != doc["tags"]
        if changed:  # else nothing to save (nor to audit)
            doc = cp.update_cluster(name, bootstrap, new_tags, force=force)
    assert doc is not None
    if as_json:
        echo_json(doc)
    else:
        verb = "updated" if changed else "unchanged:"
        click.echo(f"{verb} {doc['name']} ({doc['bootstrap']}, tags {format_tags(doc['tags'])})")


def unset_tags(
    current: Mapping[str, str], changes: Mapping[str, str], remove: Iterable[str]
) -> list[str]:
    """The keys of ``--remove-tag`` that name no tag, neither set nor being set (in the
    order given, once each): a typo used to succeed without a word."""
    missing = [k for k in remove if k not in current and k not in changes]
    return list(dict.fromkeys(missing))


@clusters.command("remove")
@click.argument("name")
@connection_options
def remove(name: str, url: str, token: str | None) -> None:
    """Unregister a cluster (refused while streams have segments on it)."""
    with connect(url, token) as cp:
        cp.delete_cluster(name)
    click.echo(f"removed {name}")


@dataclass(frozen=True)
class LocalImport:
    """What `clusters import-local` did: the clusters registered or refreshed, and one
    line per cluster it refused to re-point."""

    clusters: list[dict[str, Any]]
    refused: list[str]


def import_local_clusters(
    cp: ControlPlaneClient, data_dir: Path, force: bool = False
) -> LocalImport:
    """Register (env=local) or refresh the bootstrap of every cluster of the local fleet
    (its tags are kept), as `control-plane serve --import-local` does: a new name is
    registered even if it does not answer (the descriptor is the truth about local
    clusters: one may be down), and a registered one is moved to the descriptor's
    bootstrap even if that is another Kafka cluster (`local up` after `local down
    --purge` makes new ones, maybe at new ports) unless streams have segments on it
    (the server's ``protect_segments``): that one is left as it is, named in
    ``refused``, and the others are imported. An unchanged bootstrap keeps its recorded
    Kafka cluster id. ``force`` moves every cluster, segments or not, and records the
    Kafka cluster answering at each bootstrap now (what this command did before)."""
    imported: list[dict[str, Any]] = []
    refused: list[str] = []
    for name, bootstrap in local_fleet_clusters(data_dir):
        try:
            imported.append(cp.register_cluster(name, bootstrap, LOCAL_TAGS, force=True))
            continue
        except Conflict:
            current = cp.get_cluster(name)
        tags = {**LOCAL_TAGS, **current["tags"]}  # the user's win
        unchanged = same_bootstrap(current["bootstrap"], bootstrap)
        moved = None if unchanged and not force else bootstrap
        try:
            imported.append(
                cp.update_cluster(name, moved, tags, force=True, protect_segments=not force)
            )
        except Conflict as exc:
            if force:
                raise
            refused.append(
                f"{exc}; to re-point it anyway: `streamplane clusters update {name} "
                f"--bootstrap {bootstrap} --force` (or `clusters import-local --force`)"
            )
    return LocalImport(imported, refused)


@clusters.command("import-local")
@data_dir_option
@click.option(
    "--force",
    is_flag=True,
    help="Re-point every registered cluster to the fleet's bootstrap, even one with "
    "segments of streams on it whose new address is another Kafka cluster (or does not "
    "answer), and record the Kafka cluster answering there now.",
)
@json_option
@connection_options
def import_local(data_dir: Path, force: bool, as_json: bool, url: str, token: str | None) -> None:
    """Register the clusters of the local fleet (`streamplane local up`), tagged env=local,
    or move registered ones to the fleet's bootstrap. A cluster with segments of streams
    on it is not moved to another Kafka cluster unless --force: it is named on stderr,
    the others are imported, and the exit code is 1."""
    with connect(url, token) as cp:
        done = import_local_clusters(cp, data_dir, force)
    if as_json:
        echo_json(done.clusters)
    else:
        click.echo(clusters_table(done.clusters))
    for line in done.refused:
        click.echo(f"refused: {line}", err=True)
    if done.refused:
        raise Conflict(
            f"{len(done.refused)} local cluster(s) not re-pointed (see above); the others "
            "were imported"
        )
