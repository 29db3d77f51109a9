"""The `streamplane` command. Only this layer builds real clients or exits."""

from __future__ import annotations

import sys

import click

from streamplane import __version__
from streamplane.cli.clusters import clusters
from streamplane.cli.control_plane import control_plane
from streamplane.cli.dlq import dlq
from streamplane.cli.groups import groups
from streamplane.cli.lag import lag
from streamplane.cli.local import local
from streamplane.cli.ops import ops
from streamplane.cli.pipeline import generate, pipeline
from streamplane.cli.run import run
from streamplane.cli.streams import streams
from streamplane.exceptions import StreamplaneError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="streamplane")
def cli() -> None:
    """streamplane: streams, lanes and per-record acks over a fleet of Kafka clusters."""


cli.add_command(local)
cli.add_command(run)
cli.add_command(control_plane)
cli.add_command(clusters)
cli.add_command(streams)
cli.add_command(groups)
cli.add_command(dlq)
cli.add_command(lag)
cli.add_command(pipeline)
cli.add_command(generate)
cli.add_command(ops)


def main() -> None:
    """Entry point: streamplane errors become one line on stderr and exit code 1."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except StreamplaneError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
