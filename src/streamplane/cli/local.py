"""`streamplane local ...`: the local fleet of real Kafka clusters."""

from __future__ import annotations

import time
from pathlib import Path

import click

from streamplane.cli.output import progress, table
from streamplane.core.text import counted
from streamplane.local.distribution import KafkaDistribution
from streamplane.local.fleet import ClusterStatus, FleetSpec, LocalFleet

DEFAULT_DATA_DIR = Path(".streamplane") / "local"


def data_dir_option(f: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--data-dir",
        type=click.Path(path_type=Path, file_okay=False),
        default=DEFAULT_DATA_DIR,
        envvar="STREAMPLANE_LOCAL_DIR",
        show_envvar=True,
        show_default=True,
        help="Where the fleet keeps broker data, logs and its descriptor (fleet.json).",
    )(f)


@click.group("local")
def local() -> None:
    """Run a fleet of real Apache Kafka clusters (KRaft) on loopback."""


@local.command("install")
def install() -> None:
    """Resolve the Kafka broker jars with Maven (does nothing if already resolved)."""
    dist = KafkaDistribution()
    already = dist.is_resolved()
    if not already:
        progress("resolving Apache Kafka and its runtime dependencies with Maven")
    dist.resolve()
    click.echo(f"Kafka {dist.version()} ready ({'cached' if already else 'resolved'})")


@local.command("up")
@click.option("--clusters", type=int, default=2, show_default=True, help="Number of clusters.")
@click.option(
    "--brokers-per-cluster", type=int, default=1, show_default=True, help="Brokers per cluster."
)
@click.option("--racks", default="", help="Rack names, e.g. a,b,c (broker i gets rack i mod n).")
@click.option(
    "--base-port",
    type=int,
    default=None,
    help="First port to use (default: free ports below the ephemeral port range).",
)
@click.option("--heap-mb", type=int, default=512, show_default=True, help="Max heap per broker.")
@click.option(
    "--broker-config",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra broker setting (repeatable), e.g. offset.metadata.max.bytes=1024.",
)
@data_dir_option
def up(
    clusters: int,
    brokers_per_cluster: int,
    racks: str,
    base_port: int | None,
    heap_mb: int,
    broker_config: tuple[str, ...],
    data_dir: Path,
) -> None:
    """Start the fleet and wait until every broker answers.

    A data directory holding a stopped fleet (after a plain `local down`) gets it back
    with its data: same clusters, cluster ids, ports, topics and records. Asking for
    another shape (clusters, brokers per cluster, racks, --base-port) is refused, nothing
    deleted: use the same shape, or `local down --purge` first.
    """
    extra = {}
    for item in broker_config:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(
                f"expected KEY=VALUE, got {item!r}", param_hint="--broker-config"
            )
        extra[key.strip()] = value.strip()
    spec = FleetSpec(
        data_dir=data_dir,
        clusters=clusters,
        brokers_per_cluster=brokers_per_cluster,
        racks=tuple(r.strip() for r in racks.split(",")) if racks else (),
        base_port=base_port,
        heap_mb=heap_mb,
        broker_config=extra,
    )
    spec.validate()
    warning = spec.port_warning()
    if warning:
        click.echo(f"warning: {warning}", err=True)
    started = time.monotonic()
    fleet = LocalFleet(data_dir)
    desc = fleet.up(spec, progress=progress)
    click.echo(
        f"{counted(len(desc.clusters), 'cluster')} up in {time.monotonic() - started:.1f}s "
        f"(Kafka {desc.kafka_version}); descriptor: {fleet.descriptor_file}"
    )
    for c in desc.clusters.values():
        racks_txt = ",".join(sorted({b.rack for b in c.brokers if b.rack})) or "-"
        click.echo(f"  {c.name}: {c.bootstrap}  brokers={len(c.brokers)}  racks={racks_txt}")


@local.command("down")
@click.option(
    "--purge",
    is_flag=True,
    help="Also delete the brokers' data and logs (even with nothing running).",
)
@data_dir_option
def down(purge: bool, data_dir: Path) -> None:
    """Stop every broker of the fleet. Nothing running is not an error.

    Without --purge the brokers' data stays: `local up` with the same --data-dir and
    shape starts the fleet again with its topics and records. With --purge, also delete
    the brokers' directories (<data-dir>/<cluster>/broker-<id>), running or not; nothing
    else under the data directory is touched.
    """
    fleet = LocalFleet(data_dir)
    stopped = fleet.down()
    click.echo(f"stopped {counted(stopped, 'broker')}" if stopped else "no local fleet running")
    if not purge and fleet.has_data():
        click.echo(
            f"kept the fleet's data in {fleet.data_dir}: `streamplane local up` with the same "
            "--clusters and --brokers-per-cluster starts it again; `local down --purge` "
            "deletes it"
        )
    if purge:
        deleted = fleet.purge()
        if deleted:
            names = ", ".join(str(p.relative_to(fleet.data_dir)) for p in deleted)
            click.echo(f"deleted the fleet's data and logs in {fleet.data_dir}: {names}")
        else:
            click.echo(f"no local fleet data to delete in {fleet.data_dir}")


@local.command("status")
@data_dir_option
def status(data_dir: Path) -> None:
    """A table: cluster, bootstrap, brokers up, topic count."""
    click.echo(status_table(LocalFleet(data_dir).status()))


def status_table(rows: list[ClusterStatus]) -> str:
    return table(
        ["cluster", "bootstrap", "brokers", "state", "topics"],
        [
            [
                s.name,
                s.bootstrap,
                f"{s.brokers_up}/{s.brokers_total}",
                "up" if s.up else ("degraded" if s.brokers_up else "down"),
                "?" if s.topics is None else s.topics,
            ]
            for s in rows
        ],
    )


@local.command("kill-broker")
@click.argument("cluster")
@click.argument("broker_id", type=int)
@data_dir_option
def kill_broker(cluster: str, broker_id: int, data_dir: Path) -> None:
    """Kill -9 one broker (for fault tests)."""
    b = LocalFleet(data_dir).kill_broker(cluster, broker_id)
    click.echo(f"killed broker {broker_id} of {cluster} (pid {b.pid})")


@local.command("start-broker")
@click.argument("cluster")
@click.argument("broker_id", type=int)
@data_dir_option
def start_broker(cluster: str, broker_id: int, data_dir: Path) -> None:
    """Start a stopped broker again with its data."""
    b = LocalFleet(data_dir).start_broker(cluster, broker_id)
    click.echo(f"started broker {broker_id} of {cluster} (pid {b.pid}) at {b.address}")


@local.command("add-broker")
@click.argument("cluster")
@click.option("--rack", default=None, help="The new broker's rack (broker.rack).")
@click.option(
    "--port",
    type=click.IntRange(1024, 65535),
    default=None,
    help="Its port (default: the first free one after the fleet's ports).",
)
@data_dir_option
def add_broker(cluster: str, rack: str | None, port: int | None, data_dir: Path) -> None:
    """Start one more broker (next free id) in a running CLUSTER, empty: what `ops map
    scale --new ID` then moves partitions onto."""
    b = LocalFleet(data_dir).add_broker(cluster, rack=rack, port=port)
    click.echo(
        f"added broker {b.node_id} to {cluster} (pid {b.pid}) at {b.address}"
        + (f", rack {rack}" if rack else "")
        + f"; fill it with: streamplane ops map scale --cluster {cluster} --new {b.node_id}"
    )
