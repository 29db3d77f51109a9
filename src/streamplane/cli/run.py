"""`streamplane run`: the main job on the embedded local defaults."""

from __future__ import annotations

from pathlib import Path

import click

from streamplane.cli.local import data_dir_option, status_table
from streamplane.cli.output import progress
from streamplane.local.fleet import FleetSpec, LocalFleet
from streamplane.local.smoke import round_trip


@click.command("run")
@click.option("--keep", is_flag=True, help="Leave the local fleet running afterwards.")
@data_dir_option
def run(keep: bool, data_dir: Path) -> None:
    """Bring up the local fleet, round-trip records on every cluster, print the status."""
    fleet = LocalFleet(data_dir)
    fleet.down()
    desc = fleet.up(FleetSpec(data_dir=data_dir), progress=progress)
    try:
        for cluster in desc.clusters.values():
            progress(f"round trip on {cluster.name}")
            rt = round_trip(cluster.name, cluster.bootstrap)
            click.echo(
                f"{rt.cluster}: produced {rt.produced}, consumed {rt.consumed} "
                f"(zstd, {rt.seconds:.2f}s)"
            )
        click.echo(status_table(fleet.status()))
    finally:
        if keep:
            click.echo("fleet left running; stop it with `streamplane local down`")
        else:
            fleet.down()
            click.echo("fleet stopped")
