"""`streamplane clusters ...`: the control plane's cluster registry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
from streamplane.client.control_plane import ControlPlaneClient
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


def clusters_table(rows: list[dict[str, Any]]) -> str:
    return table(
        ["cluster", "bootstrap", "health", "tags"],
        [
            [c["name"], c["bootstrap"], health_cell(c.get("health")), format_tags(c["tags"])]
            for c in rows
        ],
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


def import_local_clusters(cp: ControlPlaneClient, data_dir: Path) -> list[dict[str, Any]]:
    """Register (or refresh the bootstrap of) every cluster of the local fleet, env=local."""
    out = []
    for name, bootstrap in local_fleet_clusters(data_dir):
        try:
            # Forced: the descriptor is the truth about local clusters (one may be down).
            out.append(cp.register_cluster(name, bootstrap, LOCAL_TAGS, force=True))
        except Conflict:
            tags = {**LOCAL_TAGS, **cp.get_cluster(name)["tags"]}  # the user's win
            # The descriptor is the truth about local clusters: a `local up` after a
            # `local down --purge` is a new Kafka cluster (new id), maybe at new ports.
            out.append(cp.update_cluster(name, bootstrap, tags, force=True))
    return out


@clusters.command("import-local")
@data_dir_option
@json_option
@connection_options
def import_local(data_dir: Path, as_json: bool, url: str, token: str | None) -> None:
    """Register the clusters of the local fleet (`streamplane local up`), tagged env=local."""
    with connect(url, token) as cp:
        rows = import_local_clusters(cp, data_dir)
    if as_json:
        echo_json(rows)
    else:
        click.echo(clusters_table(rows))
