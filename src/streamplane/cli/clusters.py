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
    parse_key_values,
)
from streamplane.cli.local import data_dir_option
from streamplane.cli.output import table
from streamplane.client.control_plane import ControlPlaneClient, same_bootstrap
from streamplane.core.text import counted
from streamplane.exceptions import Conflict
from streamplane.local.fleet import FleetDescriptor, descriptor_path

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
    line per cluster it refused to register or re-point."""

    clusters: list[dict[str, Any]]
    refused: list[str]


@dataclass(frozen=True)
class LocalCluster:
    """A cluster of the local fleet as its descriptor names it."""

    name: str
    bootstrap: str
    kafka_cluster_id: str


def local_fleet(data_dir: Path) -> list[LocalCluster]:
    """Every cluster of the local fleet's descriptor, with the Kafka cluster id its
    brokers were formatted with (known whether or not they are up)."""
    desc = FleetDescriptor.load(descriptor_path(data_dir))
    return [LocalCluster(c.name, c.bootstrap, c.cluster_id) for c in desc.clusters.values()]


def registered_elsewhere(
    local: LocalCluster, registered: Iterable[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The registration, under another name than ``local``'s, of ``local``'s Kafka
    cluster, None if there is none: a cluster recorded as its Kafka cluster id, or one
    whose id is not recorded (registered before ids were, or forced while it did not
    answer) at its bootstrap. Importing it would give one Kafka cluster two names."""
    for doc in registered:
        if doc["name"] == local.name:
            continue
        recorded = doc.get("kafka_cluster_id")
        if recorded == local.kafka_cluster_id or (
            not recorded and same_bootstrap(doc["bootstrap"], local.bootstrap)
        ):
            return doc
    return None


def two_names_refusal(local: LocalCluster, other: Mapping[str, Any], new: bool) -> str:
    """The refusal of a cluster (``new``: not registered yet) whose Kafka cluster is
    registered as ``other``."""
    name, bootstrap = local.name, local.bootstrap
    what, anyway = (
        ("imported", f"streamplane clusters add {name} {bootstrap} --force")
        if new
        else ("re-pointed", f"streamplane clusters update {name} --bootstrap {bootstrap} --force")
    )
    return (
        f"cluster {name!r} not {what}: {bootstrap} is Kafka cluster {local.kafka_cluster_id}, "
        f"already registered as {other['name']!r} ({other['bootstrap']}): one name per Kafka "
        f"cluster; to import it as {name!r}: `streamplane clusters remove {other['name']}` "
        f"first; to give it both names: `{anyway}` (or `clusters import-local --force`)"
    )


def import_local_clusters(
    cp: ControlPlaneClient, data_dir: Path, force: bool = False
) -> LocalImport:
    """Register (env=local) or refresh the bootstrap of every cluster of the local fleet
    (its tags are kept), as `control-plane serve --import-local` does: a new name is
    registered even if it does not answer (the descriptor is the truth about local
    clusters: one may be down), and a registered one is moved to the descriptor's
    bootstrap even if that is another Kafka cluster (`local up` after `local down
    --purge` makes new ones, maybe at new ports) unless streams have segments on it
    (the server's ``protect_segments``). A cluster is neither registered nor moved
    when its Kafka cluster (the descriptor's id) is registered under another name
    (``registered_elsewhere``: one Kafka cluster would have two names, which a forced
    registration does not check). Those are left as they are, named in ``refused``,
    and the others are imported. An unchanged bootstrap keeps its recorded Kafka
    cluster id. ``force`` moves every cluster, segments or not, records the Kafka
    cluster answering at each bootstrap now (what this command did before), and
    registers or moves one registered under another name too."""
    imported: list[dict[str, Any]] = []
    refused: list[str] = []
    registered = {doc["name"]: doc for doc in cp.list_clusters()}
    for local in local_fleet(data_dir):
        current = registered.get(local.name)
        unchanged = current is not None and same_bootstrap(current["bootstrap"], local.bootstrap)
        other = None if force or unchanged else registered_elsewhere(local, registered.values())
        if other is not None:
            refused.append(two_names_refusal(local, other, new=current is None))
            continue
        try:
            doc = _import_one(cp, local, current, force)
        except Conflict as exc:
            if force:
                raise
            refused.append(
                f"{exc}; to re-point it anyway: `streamplane clusters update {local.name} "
                f"--bootstrap {local.bootstrap} --force` (or `clusters import-local --force`)"
            )
            continue
        imported.append(doc)
        registered[local.name] = doc  # (a cluster later in the fleet is compared with it)
    return LocalImport(imported, refused)


def _import_one(
    cp: ControlPlaneClient, local: LocalCluster, current: dict[str, Any] | None, force: bool
) -> dict[str, Any]:
    """Register ``local`` (``current`` None: not registered), or refresh its registration
    ``current`` (``import_local_clusters``). Raises Conflict if the server refuses the
    move (``protect_segments``)."""
    if current is None:
        try:
            return cp.register_cluster(local.name, local.bootstrap, LOCAL_TAGS, force=True)
        except Conflict:  # registered meanwhile
            current = cp.get_cluster(local.name)
    tags = {**LOCAL_TAGS, **current["tags"]}  # the user's win
    unchanged = same_bootstrap(current["bootstrap"], local.bootstrap)
    moved = None if unchanged and not force else local.bootstrap
    return cp.update_cluster(local.name, moved, tags, force=True, protect_segments=not force)


@clusters.command("import-local")
@data_dir_option
@click.option(
    "--force",
    is_flag=True,
    help="Re-point every registered cluster to the fleet's bootstrap, even one with "
    "segments of streams on it whose new address is another Kafka cluster (or does not "
    "answer), and record the Kafka cluster answering there now; register or re-point a "
    "cluster even if its Kafka cluster is registered under another name.",
)
@json_option
@connection_options
def import_local(data_dir: Path, force: bool, as_json: bool, url: str, token: str | None) -> None:
    """Register the clusters of the local fleet (`streamplane local up`), tagged env=local,
    or move registered ones to the fleet's bootstrap. A cluster with segments of streams
    on it is not moved to another Kafka cluster, and a Kafka cluster registered under
    another name is neither registered nor moved to, unless --force: each is named on
    stderr, the others are imported, and the exit code is 1."""
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
            f"{counted(len(done.refused), 'local cluster')} refused (see above); the others "
            "were imported"
        )
