"""`streamplane control-plane serve`: run the control plane service (uvicorn)."""

from __future__ import annotations

import errno
import socket
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from streamplane.cli.clusters import local_fleet, registered_elsewhere, two_names_refusal
from streamplane.cli.connection import (
    LOCAL_TAGS,
    STATE_DIR,
    TOKEN_ENV,
    TOKEN_FILE,
    read_token_file,
    write_new_token,
)
from streamplane.cli.local import data_dir_option
from streamplane.cli.output import progress
from streamplane.controlplane.body_limit import DEFAULT_MAX_BODY_BYTES
from streamplane.exceptions import ConfigError, Conflict
from streamplane.local.fleet import descriptor_path

if TYPE_CHECKING:
    import uvicorn

    from streamplane.controlplane.service import ControlPlaneService
    from streamplane.controlplane.watch import WatchHub

DEFAULT_DB_URL = f"sqlite:///{STATE_DIR / 'control-plane.db'}"
DEFAULT_PORT = 8470
MIB = 1024 * 1024


@click.group("control-plane")
def control_plane() -> None:
    """The control plane: cluster registry, streams, routing and failover over HTTP."""


# Settings fields as the options that set them, for one-line errors.
_OPTION_OF = {
    "db_url": "--db",
    "api_token": "--token",
    "previous_api_tokens": "--previous-token",
    "lease_ttl_s": "--lease-ttl",
    "max_body_bytes": "--max-body-mb",
    "failover.advertise_url": "--advertise-url",
    "failover.leader_lease": "--leader-lease",
    "failover.health_threshold": "--health-threshold",
    "failover.health_interval": "--health-interval",
    "failover.health_recovery": "--health-recovery",
    "failover.seal_grace": "--seal-grace",
    "failover.reader_retention": "--reader-retention",
    "failover.retired_watch": "--retired-watch",
}


@control_plane.command("serve")
@click.option(
    "--db",
    "db_url",
    envvar="STREAMPLANE_DB_URL",
    default=DEFAULT_DB_URL,
    show_default=True,
    help="SQLAlchemy URL of the store (env STREAMPLANE_DB_URL).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port (0: any free port).",
)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    default=None,
    help=f"API token for changes (env {TOKEN_ENV}; default: {TOKEN_FILE}, created if missing).",
)
@click.option(
    "--previous-token",
    "previous_tokens",
    multiple=True,
    help="A token accepted too, while clients move to a new --token (repeatable).",
)
@click.option(
    "--import-local/--no-import-local",
    default=None,
    help="Register the local fleet's clusters (tag env=local) at start. "
    "Default: if a local fleet descriptor exists.",
)
@data_dir_option
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="info",
    show_default=True,
)
@click.option("--access-log", is_flag=True, help="Log every request.")
@click.option(
    "--health/--no-health",
    envvar="STREAMPLANE_HEALTH",
    default=True,
    show_default=True,
    help="Probe every cluster each second and fail the streams of a down one over.",
)
@click.option(
    "--health-threshold",
    type=click.FloatRange(min=0.1),
    default=3.0,
    show_default=True,
    help="Seconds of failed probes before a cluster is down.",
)
@click.option("--health-interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True)
@click.option(
    "--health-recovery",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds the clusters get to come back after every one failed at once (the "
    "control plane cut off, the fleet restarting): none is failed over before.",
)
@click.option(
    "--health-failover/--no-health-failover",
    default=True,
    show_default=True,
    help="With --health: fail over the streams of a down cluster (else only report).",
)
@click.option(
    "--seal-grace",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seal a draining segment after this many seconds even if producers lag.",
)
@click.option(
    "--sealing/--no-sealing", default=True, show_default=True, help="Seal and retire segments."
)
@click.option(
    "--lease-ttl",
    type=click.FloatRange(min=0.1, max=60),
    default=1.5,
    show_default=True,
    help="Assigner: a member's work units are leased this many seconds past its heartbeat.",
)
@click.option(
    "--max-body-mb",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BODY_BYTES // MIB,
    show_default=True,
    help="The largest request body accepted, in MiB (1024 x 1024 bytes): a larger one is "
    "answered 413 unread. An Assigner heartbeat of a member holding 20,000 units is about "
    "5 MB.",
)
@click.option(
    "--advertise-url",
    envvar="STREAMPLANE_ADVERTISE_URL",
    default=None,
    help="This replica's URL as the other replicas reach it; the leader publishes it and "
    "followers forward the Assigner's requests there. Default: http://<host>:<port> (the "
    "machine's name for 0.0.0.0).",
)
@click.option(
    "--leader-lease",
    type=click.FloatRange(min=2.0, max=300),
    default=10.0,
    show_default=True,
    help="PostgreSQL: seconds a leader that stopped answering (hung, stopped) keeps the "
    "leadership before its session is ended and another replica takes over.",
)
@click.option(
    "--reader-retention",
    type=click.FloatRange(min=1.0),
    default=7 * 24 * 3600.0,
    show_default=True,
    help="Seconds a group that settled a retired segment keeps holding the stream's later "
    "segments while it commits nowhere (offline); Kafka's default offsets retention.",
)
@click.option(
    "--retired-watch",
    type=click.FloatRange(min=0.0),
    default=3600.0,
    show_default=True,
    help="Seconds a retired segment is watched for records written after its retirement "
    "(they reopen it and are read); then its topic is fenced: it refuses writes.",
)
@click.option(
    "--lag-snapshot-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the lag monitor keeps its snapshots. Default: lag/ beside a SQLite "
    "database; else .streamplane/lag/<host>-<port> of --advertise-url (one per replica).",
)
def serve(
    db_url: str,
    host: str,
    port: int,
    token: str | None,
    previous_tokens: tuple[str, ...],
    import_local: bool | None,
    data_dir: Path,
    log_level: str,
    access_log: bool,
    health: bool,
    health_threshold: float,
    health_interval: float,
    health_recovery: float,
    health_failover: bool,
    seal_grace: float,
    sealing: bool,
    lease_ttl: float,
    max_body_mb: int,
    advertise_url: str | None,
    leader_lease: float,
    reader_retention: float,
    retired_watch: float,
    lag_snapshot_dir: Path | None,
) -> None:
    """Serve the control-plane HTTP API until interrupted."""
    # Imported here so that the other commands start without FastAPI and SQLAlchemy.
    from pydantic import ValidationError

    from streamplane.controlplane.app import ControlPlaneSettings, create_app
    from streamplane.controlplane.failover_runtime import FailoverSettings
    from streamplane.controlplane.service import ControlPlaneService
    from streamplane.controlplane.store import (
        Store,
        display_url,
        lock_database_file,
        sqlite_file,
    )

    if not token:
        token = read_token_file()
        if token:
            progress(f"API token from {TOKEN_FILE}")
        else:
            token = write_new_token()
            progress(f"new API token written to {TOKEN_FILE} (mode 0600)")
    try:
        failover = FailoverSettings(
            health_enabled=health,
            health_threshold=health_threshold,
            health_interval=health_interval,
            health_recovery=health_recovery,
            health_failover=health_failover,
            seal_grace=seal_grace,
            sealing_enabled=sealing,
            advertise_url=advertise_url,
            leader_lease=leader_lease,
            reader_retention=reader_retention,
            retired_watch=retired_watch,
        )
        settings = ControlPlaneSettings(
            db_url=db_url,
            api_token=token,
            previous_api_tokens=previous_tokens,
            failover=failover,
            lease_ttl_s=lease_ttl,
            max_body_bytes=max_body_mb * MIB,
            lag_snapshot_dir=None if lag_snapshot_dir is None else str(lag_snapshot_dir),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(map(str, first["loc"]))
        raise ConfigError(f"{_OPTION_OF.get(field, field)}: {first['msg']}") from None
    import uvicorn

    _log_to_stderr(log_level)
    # One replica per SQLite file: held until this process ends.
    db_lock = lock_database_file(settings.db_url)
    db_file = sqlite_file(settings.db_url)
    new_db = db_file is not None and not db_file.exists()
    serving = False  # until then, a failure undoes what this start made
    try:
        sock = _bind(host, port)
        try:
            service = ControlPlaneService(
                Store(settings.db_url), kafka_timeout=settings.kafka_timeout
            )
            if new_db:
                progress(f"new control-plane database {db_file}")
            try:
                if import_local or (import_local is None and descriptor_path(data_dir).is_file()):
                    names = import_local_fleet(service, data_dir)
                    progress(f"registered local clusters {', '.join(names)} from {data_dir}")
                if settings.failover.advertise_url is None:
                    advertised = settings.failover.model_copy(
                        update={"advertise_url": _advertised(*sock.getsockname()[:2])}
                    )
                    settings = settings.model_copy(update={"failover": advertised})
                app = create_app(settings, service)
                config = uvicorn.Config(
                    app,
                    log_level=log_level,
                    access_log=access_log,
                    log_config=_uvicorn_log_config(),
                    timeout_graceful_shutdown=5,
                )
                server = _server(config, app.state.hub)
                bound_host, bound_port = sock.getsockname()[:2]
                url = f"http://{_url_host(bound_host)}:{bound_port}"
                click.echo(f"control plane on {url} (store {display_url(db_url)})")
                serving = True
                server.run(sockets=[sock])
            finally:
                service.close()
        finally:
            sock.close()
    finally:
        if not serving and new_db and db_file is not None:
            remove_sqlite_files(db_file)
        if db_lock is not None:
            if serving:
                db_lock.close()
            else:
                db_lock.abandon()


def remove_sqlite_files(db_file: Path) -> None:
    """Remove a SQLite database and its journal files (a new one a failed start made)."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        db_file.with_name(db_file.name + suffix).unlink(missing_ok=True)


# Every line of `serve`'s log starts with its local time, milliseconds included:
# 2025-01-31 02:41:29.769 WARNING:  database ... unavailable: ...
LOG_TIME = "%(asctime)s.%(msecs)03d "
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def _uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's logging configuration, its lines stamped with the time as ours."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    for formatter in config["formatters"].values():
        formatter["fmt"] = LOG_TIME + formatter["fmt"]
        formatter["datefmt"] = LOG_DATE_FORMAT
    return config


def _log_to_stderr(log_level: str) -> None:
    """The control plane's own log lines (leadership, database outages, sealing...) on
    stderr beside uvicorn's, in its format and at ``--log-level``; without this only
    warnings would show (through Python's last-resort handler)."""
    import logging

    from uvicorn.logging import DefaultFormatter

    logger = logging.getLogger("streamplane")
    logger.setLevel(log_level.upper())
    if not any(getattr(h, "_streamplane_serve", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(
            DefaultFormatter(
                LOG_TIME + "%(levelprefix)s %(message)s", LOG_DATE_FORMAT, use_colors=False
            )
        )
        handler._streamplane_serve = True  # type: ignore[attr-defined]
        logger.addHandler(handler)


def import_local_fleet(service: ControlPlaneService, data_dir: Path) -> list[str]:
    """Register (env=local) or refresh the bootstrap of every local-fleet cluster (its
    tags are kept).

    A registered cluster is not moved to another Kafka cluster while streams have
    segments on it (``ControlPlaneService.repoint_refusal``): a database left from an
    earlier fleet had its ``local-a`` moved to the current fleet's, and the sealer
    fenced a live stream's topics there that had the names of its retired segments.
    That is one warning saying what to do, and the cluster is left as it is. So is a
    cluster whose Kafka cluster (the descriptor's id) is registered under another name
    (``registered_elsewhere``: one Kafka cluster would have two names), as
    `clusters import-local` leaves it."""
    import logging

    from streamplane.client.control_plane import same_bootstrap
    from streamplane.controlplane.service import validate_bootstrap

    log = logging.getLogger(__name__)
    names = []
    for local in local_fleet(data_dir):
        name, bootstrap = local.name, local.bootstrap
        registered = [
            {"name": c.name, "bootstrap": c.bootstrap, "kafka_cluster_id": c.kafka_cluster_id}
            for c in service.list_clusters()
        ]
        mine = next((doc for doc in registered if doc["name"] == name), None)
        if mine is None or not same_bootstrap(str(mine["bootstrap"]), bootstrap):
            other = registered_elsewhere(local, registered)
            if other is not None:
                log.warning("local fleet: %s", two_names_refusal(local, other, mine is None))
                continue
        try:
            # Forced: the descriptor is the truth about local clusters (one may be down).
            service.register_cluster(name, bootstrap, LOCAL_TAGS, "import-local", force=True)
        except Conflict:
            current = service.get_cluster(name)
            refusal = service.repoint_refusal(name, bootstrap)
            if refusal is not None:
                log.warning(
                    "local fleet: %s; to re-point it anyway: `streamplane clusters update "
                    "%s --bootstrap %s --force`, or serve a fresh registry (--db)",
                    refusal, name, bootstrap,
                )  # fmt: skip
                names.append(name)
                continue
            tags = {**LOCAL_TAGS, **current.tags}  # the user's win
            # forced: after `local down --purge`, `local up` makes a new Kafka cluster
            # (new id), maybe at new ports; its bootstrap unchanged, its recorded Kafka
            # cluster id is kept (not taken from whatever answers there now)
            moved = None if validate_bootstrap(bootstrap) == current.bootstrap else bootstrap
            if moved is not None or tags != dict(current.tags):  # (else no audit entry)
                service.update_cluster(name, moved, tags, actor="import-local", force=True)
        names.append(name)
    return names


def _server(config: uvicorn.Config, hub: WatchHub) -> uvicorn.Server:
    import uvicorn

    class Server(uvicorn.Server):
        """On SIGTERM/SIGINT, answer the waiting long polls first so shutdown is quick."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            hub.close_threadsafe()
            super().handle_exit(sig, frame)

    return Server(config)


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host!r}: {exc.strerror}") from exc
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is already in use") from exc
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.set_inheritable(True)
    return sock


def _advertised(host: str, port: int) -> str:
    """The URL other replicas reach this one at, when --advertise-url is not given."""
    if host in ("0.0.0.0", "::"):  # every interface: the machine's name
        host = socket.getfqdn()
    return f"http://{_url_host(host)}:{port}"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
