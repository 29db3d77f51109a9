"""Start, inspect and stop a fleet of real Apache Kafka clusters (KRaft) on loopback.

Each broker runs in combined mode (``process.roles=broker,controller``) as its own JVM,
with the jars Maven resolved (see ``distribution``). A cluster of N brokers has N
controller voters (static ``controller.quorum.voters``), so killing one broker of a
three-broker cluster keeps the quorum.

The fleet is described by a JSON file (``FleetDescriptor``) that every other command
reads: cluster name -> bootstrap servers, broker ids, racks, pids, log dirs. A plain
``local down`` removes it and keeps the brokers' directories: ``local up`` on them starts
the same fleet again with its data (``stopped_fleet``).
"""

from __future__ import annotations

import base64
import contextlib
import os
import random
import re
import shlex
import signal
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from streamplane.core.replication import replication_factor
from streamplane.core.text import counted
from streamplane.exceptions import ConfigError, KafkaError, LocalFleetError
from streamplane.local.distribution import KafkaDistribution, require_java

HOST = "127.0.0.1"
DESCRIPTOR_NAME = "fleet.json"

# Settings every local broker gets. They suit a fleet of small clusters on one machine:
# explicit offsets retention, no automatic topic creation, internal topics sized down.
BASE_BROKER_CONFIG: Mapping[str, str] = {
    "auto.create.topics.enable": "false",
    "offsets.retention.minutes": "10080",
    "offset.metadata.max.bytes": "4096",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.num.partitions": "4",
    "num.partitions": "1",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "log.segment.bytes": str(64 * 1024 * 1024),
    "delete.topic.enable": "true",
}


class BrokerInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    node_id: int
    host: str
    port: int
    controller_port: int
    rack: str | None
    pid: int | None
    log_dir: str
    config_file: str
    log_file: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class ClusterInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    cluster_id: str
    brokers: list[BrokerInfo]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def broker(self, node_id: int) -> BrokerInfo:
        for b in self.brokers:
            if b.node_id == node_id:
                return b
        ids = ", ".join(str(b.node_id) for b in self.brokers)
        raise ConfigError(f"cluster {self.name!r} has no broker {node_id} (brokers: {ids})")


class FleetDescriptor(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: int = 1
    data_dir: str
    kafka_version: str
    heap_mb: int
    clusters: dict[str, ClusterInfo]

    def cluster(self, name: str) -> ClusterInfo:
        if name not in self.clusters:
            known = ", ".join(sorted(self.clusters)) or "none"
            raise ConfigError(f"unknown cluster {name!r} (known: {known})")
        return self.clusters[name]

    def bootstrap(self, name: str) -> str:
        return self.cluster(name).bootstrap

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> FleetDescriptor:
        if not path.is_file():
            raise ConfigError(f"no local fleet at {path}: run `streamplane local up` first")
        try:
            return cls.model_validate_json(path.read_text())
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"]))
            reason = f"{where}: {first['msg']}" if where else first["msg"]
            raise ConfigError(f"{path} is not a fleet descriptor ({reason})") from None
        except ValueError as exc:
            raise ConfigError(f"{path} is not a fleet descriptor: {exc}") from exc


@dataclass(frozen=True)
class FleetSpec:
    """What ``local up`` starts."""

    data_dir: Path
    clusters: int = 2
    brokers_per_cluster: int = 1
    racks: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    base_port: int | None = None
    heap_mb: int = 512
    broker_config: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 90.0

    def port_count(self) -> int:
        """How many ports the fleet listens on: a broker and a controller port per broker."""
        return 2 * self.clusters * self.brokers_per_cluster

    def port_warning(self, ephemeral: tuple[int, int] | None = None) -> str | None:
        """A one-line warning when ``--base-port`` puts the fleet in the ephemeral range."""
        if self.base_port is None:
            return None
        return ephemeral_overlap_warning(
            self.base_port, self.port_count(), ephemeral or ephemeral_port_range()
        )

    def broker_rack(self, node_id: int) -> str | None:
        """The rack of broker ``node_id`` (1, 2, ...) of each cluster: racks in turn."""
        return self.racks[(node_id - 1) % len(self.racks)] if self.racks else None

    def cluster_names(self) -> list[str]:
        if self.names:
            return list(self.names)
        return [f"local-{_letters(i)}" for i in range(self.clusters)]

    def validate(self) -> None:
        if self.clusters < 1:
            raise ConfigError("--clusters must be at least 1")
        if self.brokers_per_cluster < 1:
            raise ConfigError("--brokers-per-cluster must be at least 1")
        if self.names and len(self.names) != self.clusters:
            raise ConfigError("give one name per cluster")
        if len(set(self.cluster_names())) != self.clusters:
            raise ConfigError("cluster names must be distinct")
        if any(not r or "," in r for r in self.racks):
            raise ConfigError("--racks takes non-empty rack names separated by commas")
        if self.base_port is not None and not 1024 <= self.base_port <= 65000:
            raise ConfigError("--base-port must be between 1024 and 65000")
        if self.heap_mb < 128:
            raise ConfigError("--heap-mb must be at least 128")


def _letters(i: int) -> str:
    s = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        s = chr(ord("a") + r) + s
    return s


def new_cluster_id() -> str:
    """A Kafka cluster id: base64url of a random UUID, never starting with '-'.

    Kafka's own ``Uuid.randomUuid`` rejects ids that start with '-' because command-line
    parsers take them for options; so do we.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def descriptor_path(data_dir: Path) -> Path:
    return data_dir / DESCRIPTOR_NAME


# ---------------------------------------------------------------------- a stopped fleet
def stopped_fleet(data_dir: Path) -> dict[str, ClusterInfo]:
    """The fleet whose broker directories are under ``data_dir``, read from its files:
    cluster name -> the cluster (no pids), empty when there is none.

    ``local down`` removes the descriptor and keeps the broker directories: each
    ``server.properties`` tells a broker's id, ports and rack, and ``meta.properties`` in
    its log dir the cluster id ``local up`` formatted it with. A cluster none of whose
    brokers was formatted yet has no data and gets a new cluster id. Raises
    LocalFleetError when a cluster's brokers were formatted with different cluster ids.
    """
    brokers: dict[str, list[BrokerInfo]] = {}
    for bdir in _fleet_broker_dirs(data_dir.resolve()):
        brokers.setdefault(bdir.parent.name, []).append(_broker_on_disk(bdir))
    clusters: dict[str, ClusterInfo] = {}
    for name, found in sorted(brokers.items()):
        ids = {cid for b in found if (cid := _formatted_cluster_id(b)) is not None}
        if len(ids) > 1:
            raise LocalFleetError(
                f"the brokers of {name} in {data_dir} were formatted for different Kafka "
                f"clusters ({', '.join(sorted(ids))}): not starting them; delete their data "
                f"with `streamplane local down --purge --data-dir {shlex.quote(str(data_dir))}`"
            )
        cluster_id = ids.pop() if ids else new_cluster_id()
        ordered = sorted(found, key=lambda b: b.node_id)
        clusters[name] = ClusterInfo(name=name, cluster_id=cluster_id, brokers=ordered)
    return clusters


def controllers(cluster: ClusterInfo) -> list[BrokerInfo]:
    """The brokers ``local up`` started in ``cluster`` (controller voters too); brokers
    ``add-broker`` added have the broker role only and no controller port."""
    return [b for b in cluster.brokers if b.controller_port]


def stopped_fleet_differences(spec: FleetSpec, stopped: Mapping[str, ClusterInfo]) -> list[str]:
    """How the fleet ``spec`` asks for differs from the ``stopped`` one (``stopped_fleet``),
    one phrase per difference; empty when ``local up`` can start the stopped fleet as
    ``spec``: the same cluster names, brokers per cluster and racks, and with
    ``--base-port`` the same ports (without it, the stopped fleet's ports are kept).
    Brokers ``add-broker`` added are not part of the shape: they are started too.
    """
    wanted = spec.cluster_names()
    if sorted(wanted) != sorted(stopped):
        return [f"{_clusters_named(sorted(stopped))} on disk, {_clusters_named(wanted)} asked for"]
    differences = []
    for name in wanted:
        voters = controllers(stopped[name])
        if len(voters) != spec.brokers_per_cluster:
            differences.append(
                f"{name} has {counted(len(voters), 'broker')} on disk, "
                f"{spec.brokers_per_cluster} asked for"
            )
            continue
        racks = [b.rack for b in voters]
        asked = [spec.broker_rack(b.node_id) for b in voters]
        if racks != asked:
            differences.append(
                f"{name} has racks {_racks_text(racks)} on disk, {_racks_text(asked)} asked for"
            )
    if spec.base_port is not None and not differences:
        ports = [p for name in wanted for b in controllers(stopped[name]) for p in _broker_ports(b)]
        asked_ports = list(range(spec.base_port, spec.base_port + spec.port_count()))
        if ports != asked_ports:
            differences.append(
                f"ports {_ports_text(ports)} on disk, {_ports_text(asked_ports)} asked for"
            )
    return differences


def stopped_fleet_up_options(stopped: Mapping[str, ClusterInfo]) -> str:
    """The ``local up`` options that start the ``stopped`` fleet as it was (each followed
    by a space): its cluster count, brokers per cluster and racks; no ``--base-port``,
    as the stopped fleet keeps its ports."""
    voters = [controllers(c) for c in stopped.values()]
    options = f"--clusters {len(stopped)} "
    if voters and all(len(v) == len(voters[0]) for v in voters):
        options += f"--brokers-per-cluster {len(voters[0])} "
        racks = [b.rack for b in voters[0]]
        if all(racks) and all([b.rack for b in v] == racks for v in voters):
            options += f"--racks {','.join(r for r in racks if r)} "
    return options


def _clusters_named(names: list[str]) -> str:
    return f"{counted(len(names), 'cluster')} ({', '.join(names)})"


def _racks_text(racks: list[str | None]) -> str:
    return ",".join(r or "-" for r in racks) if any(racks) else "none"


def _ports_text(ports: list[int]) -> str:
    """``18700-18703`` for consecutive ports, else the ports listed."""
    if ports and ports == list(range(ports[0], ports[0] + len(ports))):
        return f"{ports[0]}-{ports[-1]}"
    return ",".join(map(str, ports))


def _listed(clusters: Iterable[ClusterInfo]) -> str:
    """``local-a (cluster id …, 1 broker), ...`` for progress lines."""
    return ", ".join(
        f"{c.name} (cluster id {c.cluster_id}, {counted(len(c.brokers), 'broker')})"
        for c in clusters
    )


def _new_clusters(data_dir: Path, spec: FleetSpec, ports: list[int]) -> dict[str, ClusterInfo]:
    """The clusters of a new fleet ``spec`` on ``ports`` (two per broker), with new cluster
    ids. Refuses a broker directory that exists with something in it: it is not a fleet's
    (``stopped_fleet`` found none), and its data would be mixed into the new cluster's."""
    port_iter = iter(ports)
    clusters: dict[str, ClusterInfo] = {}
    for name in spec.cluster_names():
        brokers = []
        for node_id in range(1, spec.brokers_per_cluster + 1):
            bdir = data_dir / name / f"broker-{node_id}"
            if bdir.is_dir() and any(bdir.iterdir()):
                raise LocalFleetError(
                    f"{bdir} exists and is not a local fleet's broker directory (no "
                    "server.properties of the fleet's): move it away or delete it, or use "
                    "another --data-dir"
                )
            port, controller_port = next(port_iter), next(port_iter)
            brokers.append(
                broker_in(bdir, node_id, port, controller_port, spec.broker_rack(node_id))
            )
        clusters[name] = ClusterInfo(name=name, cluster_id=new_cluster_id(), brokers=brokers)
    return clusters


def _require_ports_free(clusters: Iterable[ClusterInfo]) -> None:
    """Raise LocalFleetError naming the first port of a stopped fleet that is in use."""
    for cluster in clusters:
        for b in cluster.brokers:
            for port in _broker_ports(b):
                if not _port_free(port):
                    raise LocalFleetError(
                        f"broker {b.node_id} of {cluster.name} cannot start again on its "
                        f"port: {_port_in_use(port)}"
                    )


class LocalFleet:
    """Operations on the local fleet rooted at ``data_dir``."""

    def __init__(self, data_dir: Path, distribution: KafkaDistribution | None = None) -> None:
        self.data_dir = data_dir.resolve()
        self.distribution = distribution or KafkaDistribution()

    @property
    def descriptor_file(self) -> Path:
        return descriptor_path(self.data_dir)

    def descriptor(self) -> FleetDescriptor:
        return FleetDescriptor.load(self.descriptor_file)

    # ------------------------------------------------------------------ up
    def up(
        self, spec: FleetSpec, progress: Callable[[str], None] = lambda _: None
    ) -> FleetDescriptor:
        """Start the fleet ``spec`` asks for and wait until every broker answers.

        A data directory that holds a stopped fleet (after a plain ``local down``, a
        crash or a reboot) gets that fleet back with its data: the same clusters, cluster
        ids, broker ids, ports and log dirs, and the brokers ``add-broker`` added. The
        shape ``spec`` asks for must be the stopped fleet's (``stopped_fleet_differences``):
        otherwise nothing is started or deleted and the error says how to start it as it
        was, or to delete its data with ``local down --purge``. Its settings (heap, broker
        config) are written anew from ``spec``.
        """
        spec.validate()
        java = require_java()
        self._check_not_running()
        _ensure_writable(self.data_dir)
        stopped = stopped_fleet(self.data_dir)
        if stopped:
            differences = stopped_fleet_differences(spec, stopped)
            if differences:
                raise ConfigError(self._shape_refusal(differences, stopped))
            clusters = {name: stopped[name] for name in spec.cluster_names()}
            _require_ports_free(clusters.values())
            progress(
                f"restarting the stopped fleet in {self.data_dir} with its data: "
                + _listed(clusters.values())
            )
        else:
            ports = _allocate_ports(spec.port_count(), spec.base_port)
            clusters = _new_clusters(self.data_dir, spec, ports)
        progress("resolving Kafka jars")
        classpath = self.distribution.classpath()
        kafka_version = self.distribution.version()
        for cluster in clusters.values():
            _write_cluster_files(cluster, spec)
        unformatted = [
            c.model_copy(update={"brokers": [b for b in c.brokers if not _is_formatted(b)]})
            for c in clusters.values()
        ]
        count = sum(len(c.brokers) for c in unformatted)
        if count:
            progress(f"formatting storage for {counted(count, 'broker')}")
            _format_all(java, classpath, unformatted)

        started: dict[str, ClusterInfo] = {}
        marks: dict[str, int] = {}
        try:
            for name, cluster in clusters.items():
                brokers = []
                for b in cluster.brokers:
                    marks.update(_log_marks(b))
                    pid = _launch(java, classpath, b, spec.heap_mb)
                    brokers.append(b.model_copy(update={"pid": pid}))
                started[name] = cluster.model_copy(update={"brokers": brokers})
            desc = FleetDescriptor(
                data_dir=str(self.data_dir),
                kafka_version=kafka_version,
                heap_mb=spec.heap_mb,
                clusters=started,
            )
            desc.save(self.descriptor_file)
            progress(f"waiting for {', '.join(started)} to become healthy")
            for cluster in started.values():
                wait_healthy(cluster, timeout_s=spec.startup_timeout_s, log_marks=marks)
        except BaseException:
            for cluster in started.values():
                for b in cluster.brokers:
                    _stop_pid(b.pid, b.config_file, grace_s=2.0)
            with contextlib.suppress(FileNotFoundError):
                self.descriptor_file.unlink()
            raise
        return desc

    def _shape_refusal(self, differences: list[str], stopped: Mapping[str, ClusterInfo]) -> str:
        data_dir = shlex.quote(str(self.data_dir))
        return (
            f"{self.data_dir} holds the data of a stopped fleet that is not the one asked "
            f"for: {'; '.join(differences)}. Nothing was started or deleted. Start it as it "
            f"was, on its own ports, with `streamplane local up "
            f"{stopped_fleet_up_options(stopped)}--data-dir {data_dir}`; delete its data "
            f"first with `streamplane local down --purge --data-dir {data_dir}`; or use "
            "another --data-dir"
        )

    def _check_not_running(self) -> None:
        if not self.descriptor_file.is_file():
            return
        try:
            desc = self.descriptor()
        except ConfigError:
            return
        alive = [
            b
            for c in desc.clusters.values()
            for b in c.brokers
            if _is_our_broker(b.pid, b.config_file)
        ]
        if alive:
            raise LocalFleetError(
                f"a local fleet is already running in {self.data_dir} "
                f"({len(alive)} brokers up): run `streamplane local down --data-dir "
                f"{shlex.quote(str(self.data_dir))}` first"
            )

    # ------------------------------------------------------------------ down
    def down(self, purge: bool = False) -> int:
        """Stop every broker; returns how many were running. Nothing running is not an
        error. ``purge``: delete the fleet's data too (``purge``), running or not (a
        fleet stopped before kept its data, and ``up`` would start it again)."""
        if not self.descriptor_file.is_file():
            if purge:
                self.purge()
            return 0
        desc = self.descriptor()
        stopped = 0
        brokers = [b for c in desc.clusters.values() for b in c.brokers]
        for b in brokers:
            if _is_our_broker(b.pid, b.config_file):
                assert b.pid is not None
                os.kill(b.pid, signal.SIGTERM)
                stopped += 1
        for b in brokers:
            _stop_pid(b.pid, b.config_file, grace_s=20.0)
        self.descriptor_file.unlink()
        if purge:
            self.purge(desc)
        return stopped

    def has_data(self) -> bool:
        """True when the data directory holds broker directories of a fleet (running or
        stopped): what ``local up`` starts again and ``local down --purge`` deletes."""
        return bool(_fleet_broker_dirs(self.data_dir))

    def purge(self, desc: FleetDescriptor | None = None) -> list[Path]:
        """Delete the fleet's broker data and logs; returns the directories deleted.

        Nothing running is fine: this is what ``local down --purge`` does after a plain
        ``local down`` removed the descriptor. Only what ``up`` and ``add-broker`` create
        is deleted: ``<data-dir>/<cluster>/broker-<id>/`` directories holding the
        ``server.properties`` the fleet wrote (its ``log.dirs`` is that directory's
        ``data/``), or named by the descriptor ``desc``; a cluster directory goes too once
        nothing else is left in it. Anything else under the data directory (the control
        plane's state, a warehouse, a user's files) stays. Refuses, deleting nothing,
        while a process still runs with one of those brokers' settings.
        """
        brokers = set(_fleet_broker_dirs(self.data_dir))
        if desc is not None:
            for c in desc.clusters.values():
                for b in c.brokers:
                    bdir = Path(b.config_file).parent
                    if bdir.parent.parent == self.data_dir and _BROKER_DIR.fullmatch(bdir.name):
                        brokers.add(bdir)
        for bdir in sorted(brokers):
            pid = _process_using(bdir / "server.properties")
            if pid is not None:
                raise LocalFleetError(
                    f"broker data in {bdir} is in use by pid {pid}: not deleting anything; "
                    "stop that process first"
                )
        deleted: list[Path] = []
        for cluster_dir in sorted({b.parent for b in brokers}):
            mine = sorted(b for b in brokers if b.parent == cluster_dir)
            for bdir in mine:
                _remove_tree(bdir)
            try:
                cluster_dir.rmdir()  # only if nothing else is left in it
            except OSError:
                deleted += [b for b in mine if not b.exists()]
            else:
                deleted.append(cluster_dir)
        return deleted

    # ------------------------------------------------------------------ faults
    def kill_broker(self, cluster: str, node_id: int) -> BrokerInfo:
        desc = self.descriptor()
        broker = desc.cluster(cluster).broker(node_id)
        if not _is_our_broker(broker.pid, broker.config_file):
            raise LocalFleetError(f"broker {node_id} of {cluster} is not running")
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGKILL)
        _wait_dead(broker.pid, 10.0)
        return broker

    def start_broker(self, cluster: str, node_id: int, wait: bool = True) -> BrokerInfo:
        desc = self.descriptor()
        info = desc.cluster(cluster)
        broker = info.broker(node_id)
        if _is_our_broker(broker.pid, broker.config_file):
            raise LocalFleetError(f"broker {node_id} of {cluster} is already running")
        for port in _broker_ports(broker):
            if not _port_free(port):
                raise LocalFleetError(
                    f"broker {node_id} of {cluster} cannot start: {_port_in_use(port)}"
                )
        java = require_java()
        classpath = self.distribution.classpath()
        marks = _log_marks(broker)
        pid = _launch(java, classpath, broker, desc.heap_mb)
        new_broker = broker.model_copy(update={"pid": pid})
        brokers = [new_broker if b.node_id == node_id else b for b in info.brokers]
        clusters = dict(desc.clusters)
        clusters[cluster] = info.model_copy(update={"brokers": brokers})
        desc = desc.model_copy(update={"clusters": clusters})
        desc.save(self.descriptor_file)
        if wait:
            _wait_broker(new_broker, 60.0, marks)
        return new_broker

    def add_broker(
        self, cluster: str, rack: str | None = None, port: int | None = None
    ) -> BrokerInfo:
        """Start one more broker (broker role only, next free id) in a running cluster.

        Its settings are copied from broker 1's file with the node id, listener, log dir
        and rack changed; the controller quorum stays the original voters. It listens on
        ``port``, by default the first free one after the fleet's (``port_after``).
        """
        desc = self.descriptor()
        info = desc.cluster(cluster)
        first = info.brokers[0]
        node_id = max(b.node_id for b in info.brokers) + 1
        taken = {p for c in desc.clusters.values() for b in c.brokers for p in _broker_ports(b)}
        if port is None:
            port = port_after(taken, ephemeral_port_range(), _port_free)
        elif port in taken or not _port_free(port):
            raise ConfigError(f"broker {node_id} of {cluster} cannot listen: {_port_in_use(port)}")
        bdir = Path(first.config_file).parent.parent / f"broker-{node_id}"
        broker = broker_in(bdir, node_id, port, 0, rack)
        write_broker_only_files(broker, first)
        java = require_java()
        classpath = self.distribution.classpath()
        _format_all(java, classpath, [info.model_copy(update={"brokers": [broker]})])
        marks = _log_marks(broker)
        broker = broker.model_copy(update={"pid": _launch(java, classpath, broker, desc.heap_mb)})
        clusters = dict(desc.clusters)
        clusters[cluster] = info.model_copy(update={"brokers": [*info.brokers, broker]})
        desc.model_copy(update={"clusters": clusters}).save(self.descriptor_file)
        _wait_broker(broker, 60.0, marks)
        return broker

    # ------------------------------------------------------------------ status
    def status(self) -> list[ClusterStatus]:
        desc = self.descriptor()
        return [cluster_status(c) for c in desc.clusters.values()]


@dataclass(frozen=True)
class ClusterStatus:
    name: str
    bootstrap: str
    brokers_up: int
    brokers_total: int
    topics: int | None  # None when the cluster did not answer

    @property
    def up(self) -> bool:
        return self.brokers_up == self.brokers_total


def cluster_status(cluster: ClusterInfo) -> ClusterStatus:
    up = [b for b in cluster.brokers if _is_our_broker(b.pid, b.config_file) and _port_open(b)]
    topics: int | None = None
    if up:
        from streamplane.kafka.admin import KafkaAdmin

        try:
            md = KafkaAdmin(",".join(b.address for b in up)).metadata(timeout=3.0)
            topics = len([t for t in md.topics if not t.startswith("__")])
        except KafkaError:
            topics = None
    return ClusterStatus(cluster.name, cluster.bootstrap, len(up), len(cluster.brokers), topics)


def wait_healthy(
    cluster: ClusterInfo, timeout_s: float = 90.0, log_marks: Mapping[str, int] | None = None
) -> None:
    """Wait until every broker answers and the cluster metadata lists all of them.

    ``log_marks`` (from ``_log_marks`` before the launch) limits the log lines quoted
    when a broker dies to those of this start.
    """
    from streamplane.kafka.admin import KafkaAdmin

    deadline = time.monotonic() + timeout_s
    for b in cluster.brokers:
        _wait_broker(b, max(1.0, deadline - time.monotonic()), log_marks)
    expected = {b.node_id for b in cluster.brokers}
    admin = KafkaAdmin(cluster.bootstrap)
    last = ""
    while time.monotonic() < deadline:
        try:
            md = admin.metadata(timeout=2.0)
            if set(md.brokers) >= expected and md.controller_id != -1:
                return
            last = f"metadata lists brokers {sorted(md.brokers)}"
        except KafkaError as exc:
            last = str(exc)
        time.sleep(0.2)
    raise LocalFleetError(f"cluster {cluster.name} not healthy after {timeout_s:.0f}s ({last})")


# ---------------------------------------------------------------------- helpers
def _wait_broker(
    b: BrokerInfo, timeout_s: float, log_marks: Mapping[str, int] | None = None
) -> None:
    """Wait until broker ``b`` (just launched) answers on its port. LocalFleetError when
    its process exits first (``_exit_message``), or when it does not answer within
    ``timeout_s`` (``_no_answer_message``, which stops it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if b.pid is not None and not _pid_alive(b.pid):
            raise LocalFleetError(_exit_message(b, log_marks or {}))
        if _port_open(b):
            return
        time.sleep(0.1)
    raise LocalFleetError(_no_answer_message(b, timeout_s, log_marks or {}))


def _no_answer_message(b: BrokerInfo, timeout_s: float, log_marks: Mapping[str, int]) -> str:
    """Why broker ``b`` did not answer within ``timeout_s``: its exit and why (a bind
    error from its log) if it has died meanwhile, else that it was stopped, with its last
    log lines. A broker still running is stopped here: left running without listening,
    the next ``start-broker`` refused it as "already running"."""
    if b.pid is not None and not _pid_alive(b.pid):
        return _exit_message(b, log_marks)
    _stop_pid(b.pid, b.config_file, grace_s=10.0)
    return (
        f"broker {b.node_id} ({b.address}) did not answer in {timeout_s:.0f}s: stopped it "
        f"(pid {b.pid}); last log lines: {_log_tail(_new_log_lines(b, log_marks))}"
    )


def _exit_message(b: BrokerInfo, log_marks: Mapping[str, int]) -> str:
    """Why broker ``b`` exited during start-up, from this start's log lines only."""
    new_lines = _new_log_lines(b, log_marks)
    why = "exited during start-up"
    busy = [p for p in _broker_ports(b) if not _port_free(p)]
    if not busy:
        text = "\n".join(new_lines)
        if "Address already in use" in text or "BindException" in text:
            busy = [int(m) for m in _BIND_FAILED.findall(text)] or list(_broker_ports(b))
    if busy:
        why = "could not listen: " + "; ".join(_port_in_use(p) for p in dict.fromkeys(busy))
    return f"broker {b.node_id} ({b.address}) {why}; last log lines: {_log_tail(new_lines)}"


# Kafka's SocketServer: "Socket server failed to bind to 127.0.0.1:39300: Address already in use."
_BIND_FAILED = re.compile(r"failed to bind to \S*?:(\d+)")


def _log_marks(b: BrokerInfo) -> dict[str, int]:
    """The current sizes of broker ``b``'s log files: what a start attempt appends comes after."""
    marks = {}
    for path in _log_files(b):
        with contextlib.suppress(OSError):
            marks[str(path)] = path.stat().st_size
    return marks


def _log_files(b: BrokerInfo) -> list[Path]:
    return [Path(b.log_file).parent / "stdout.log", Path(b.log_file)]


def _new_log_lines(b: BrokerInfo, log_marks: Mapping[str, int]) -> list[str]:
    """The lines broker ``b`` logged after ``log_marks`` (stdout.log's, then server.log's)."""
    lines: list[str] = []
    for path in _log_files(b):
        try:
            with open(path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                offset = log_marks.get(str(path), 0)
                f.seek(offset if offset <= size else 0)  # smaller: the log rolled over
                lines += f.read().decode(errors="replace").strip().splitlines()
        except OSError:
            continue
    return lines


def _log_tail(lines: list[str], count: int = 3) -> str:
    interesting = [t for t in lines if "ERROR" in t or "Exception" in t] or lines
    return " | ".join(interesting[-count:]) or "(no log)"


def _port_open(b: BrokerInfo) -> bool:
    """True if something listens on broker ``b``'s port.

    A connection to itself is no answer: with the port in the ephemeral range, the
    kernel can give this probe that very port as source port and the connect succeeds
    with nobody listening (TCP simultaneous open; local address == peer address). Such
    a connection holds the port the broker needs, so it is reset at once (SO_LINGER 0:
    no TIME_WAIT left behind)."""
    with socket.socket() as s:
        s.settimeout(0.5)
        if s.connect_ex((b.host, b.port)) != 0:
            return False
        try:
            if s.getsockname() != s.getpeername():
                return True
        except OSError:  # reset already
            return False
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return False


def _broker_ports(b: BrokerInfo) -> list[int]:
    """The ports broker ``b`` listens on (a broker-only broker has no controller port)."""
    return [p for p in (b.port, b.controller_port) if p]


# ---------------------------------------------------------------------- ports
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)  # Linux's default
PORT_SEARCH_FLOOR = 20000  # default ports are chosen from here up to the ephemeral range


def ephemeral_port_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral (client source) port range, or Linux's default."""
    try:
        low, high = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    if not 1 <= low <= high <= 65535:
        return DEFAULT_EPHEMERAL_RANGE
    return low, high


def choose_ports(
    count: int,
    ephemeral: tuple[int, int],
    is_free: Callable[[int], bool],
    *,
    avoid: Collection[int] = (),
    rng: random.Random | None = None,
) -> list[int]:
    """``count`` distinct ports for which ``is_free`` holds, all outside ``ephemeral``.

    A fleet port inside the ephemeral range can be handed to a client as its source
    port: a client reconnecting to a stopped broker's port then connects to itself
    (TCP simultaneous open) and holds the port, so the broker cannot start again.

    The search runs from ``PORT_SEARCH_FLOOR`` up to the range's low end (then, if too
    few are free there, above its high end), from a random place, wrapping around: the
    ports of another fleet's stopped broker look free, and a fixed first port would give
    them out again. ``avoid`` are ports never to give (this fleet's own).
    """
    low, high = ephemeral
    below = range(PORT_SEARCH_FLOOR if low > PORT_SEARCH_FLOOR else 1024, low)
    above = range(max(high + 1, 1024), 65536)
    rng = rng or random.Random()
    pool = [*_rotated(below, rng), *_rotated(above, rng)]
    avoided = set(avoid)
    ports: list[int] = []
    for port in pool:
        if port not in avoided and is_free(port):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise LocalFleetError(
        f"found {len(ports)} of {count} free ports outside the ephemeral port range "
        f"{low}-{high}: pass --base-port"
    )


def _rotated(ports: range, rng: random.Random) -> list[int]:
    start = rng.randrange(len(ports)) if ports else 0
    return [*ports[start:], *ports[:start]]


def ephemeral_overlap_warning(first: int, count: int, ephemeral: tuple[int, int]) -> str | None:
    """A one-line warning if ports ``first`` .. ``first + count - 1`` meet ``ephemeral``."""
    last = first + count - 1
    low, high = ephemeral
    if last < low or first > high:
        return None
    return (
        f"ports {first}-{last} are in the ephemeral port range {low}-{high} "
        "(net.ipv4.ip_local_port_range): a client retrying a stopped broker can get its "
        "port as source port and connect to itself, holding the port so that the broker "
        f"cannot start again; a base port below {low} avoids this"
    )


def _allocate_ports(count: int, base_port: int | None, avoid: Collection[int] = ()) -> list[int]:
    if base_port is not None:
        ports = list(range(base_port, base_port + count))
        for p in ports:
            if not _port_free(p):
                raise ConfigError(f"port {p} on {HOST} is already in use (--base-port {base_port})")
        return ports
    return free_ports(count, avoid)


def port_after(
    taken: Collection[int], ephemeral: tuple[int, int], is_free: Callable[[int], bool]
) -> int:
    """The first free port after the fleet's own ports (``taken``), outside ``ephemeral``:
    a broker added to a fleet started with ``--base-port`` stays next to its ports (it
    took any free port, far from them). Failing that (the fleet's last port is at the
    ephemeral range or the top), any free port, as ``free_ports`` chooses."""
    start = max(taken, default=PORT_SEARCH_FLOOR - 1) + 1  # above every port taken
    low, high = ephemeral
    if low <= start <= high:
        start = high + 1
    for port in range(start, low if start < low else 65536):
        if is_free(port):
            return port
    return choose_ports(1, ephemeral, is_free, avoid=taken)[0]


def free_ports(count: int, avoid: Collection[int] = ()) -> list[int]:
    """``count`` free loopback ports below the ephemeral range (``choose_ports``): for the
    fleet's brokers, and for any server a client may retry while it is stopped (the
    control plane)."""
    return choose_ports(count, ephemeral_port_range(), _port_free, avoid=avoid)


def _port_free(port: int) -> bool:
    """True if a server (with SO_REUSEADDR, as Kafka's) can listen on ``port`` of HOST."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
            s.listen(1)  # a bind can succeed where a listen fails (another SO_REUSEADDR socket)
        except OSError:
            return False
        return True


def _port_in_use(port: int) -> str:
    """``port N is in use``, with what holds it when /proc tells."""
    holder = _port_holder(port)
    return f"port {port} is in use" + (f" ({holder})" if holder else "")


_TCP_STATES = {"01": "connected", "06": "in TIME_WAIT", "0A": "listening"}


def sockets_on_port(proc_net_tcp: str, port: int) -> list[tuple[int, str, bool]]:
    """From a /proc/net/tcp{,6} table: (inode, state, connected to itself) of the sockets
    whose local port is ``port``."""
    found = []
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or ":" not in fields[1]:
            continue
        local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
        if int(local.rsplit(":", 1)[1], 16) != port:
            continue
        found.append((int(inode), _TCP_STATES.get(state, f"in TCP state {state}"), local == remote))
    return found


def _port_holder(port: int) -> str | None:
    """Which process holds ``port`` and how, read from /proc (None if not knowable)."""
    sockets: list[tuple[int, str, bool]] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            sockets += sockets_on_port(Path(table).read_text(), port)
    if not sockets:
        return None
    # The telling one first: a self-connection, a listener, then any socket a process owns
    # (a TIME_WAIT socket has inode 0 and no owner; one that had no SO_REUSEADDR, as a
    # client's, still blocks a listener until the kernel drops it, within a minute).
    sockets.sort(key=lambda s: (not s[2], s[1] != "listening", s[0] == 0))
    inode, state, to_itself = sockets[0]
    how = state
    if to_itself:
        how = "a socket connected to itself: a client retrying the port got it as source port"
    if state == "in TIME_WAIT":
        how = f"{how}, closed but in TIME_WAIT: free again within a minute"
    pid = _socket_owner(inode) if inode else None
    if pid is None:
        return how
    with contextlib.suppress(OSError):
        name = Path(f"/proc/{pid}/comm").read_text().strip()
        return f"held by pid {pid} ({name}), {how}"
    return f"held by pid {pid}, {how}"


def _socket_owner(inode: int) -> int | None:
    target = f"socket:[{inode}]"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) == target:
                        return int(proc.name)
    return None


def _ensure_writable(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"data dir {path} is not writable: {exc.strerror or exc}") from exc


_BROKER_DIR = re.compile(r"broker-[0-9]+")


def _fleet_broker_dirs(data_dir: Path) -> list[Path]:
    """The ``<cluster>/broker-<id>`` directories under ``data_dir`` that a local fleet
    made: each holds a ``server.properties`` whose ``log.dirs`` is its own ``data/``
    (``broker_in``), wherever the data directory has been moved since."""
    found: list[Path] = []
    if not data_dir.is_dir():
        return found
    for bdir in sorted(data_dir.glob("*/broker-*")):
        config_file = bdir / "server.properties"
        if not (_BROKER_DIR.fullmatch(bdir.name) and bdir.is_dir() and config_file.is_file()):
            continue
        if bdir.is_symlink() or bdir.parent.is_symlink():
            continue
        try:
            lines = config_file.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        config = dict(line.split("=", 1) for line in lines if "=" in line)
        log_dirs = Path(config.get("log.dirs", ""))
        if "node.id" in config and log_dirs.parts[-2:] == (bdir.name, "data"):
            found.append(bdir)
    return found


def _process_using(config_file: Path) -> int | None:
    """The pid of a live process started with ``config_file`` (a broker), if any."""
    wanted = str(config_file).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if wanted in (proc / "cmdline").read_bytes().split(b"\0"):
                return int(proc.name)
    return None


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _heap_sized_broker_config(heap_mb: int) -> dict[str, str]:
    """Broker settings that must scale with the heap the fleet gives each broker.

    The log cleaner (it compacts ``__consumer_offsets`` and the spill topics) allocates
    its dedupe buffer, 128 MiB by Kafka's default, as one array when it starts: in a
    256 MiB heap that allocation fails often enough to kill the broker at start-up
    ("OutOfMemoryError: Java heap space"), and in 128 MiB always. An eighth of the heap
    is plenty for a local fleet: at 24 bytes a key, a 256 MiB broker still dedupes
    over a million keys per cleaning pass.
    """
    return {"log.cleaner.dedupe.buffer.size": str(heap_mb * 1024 * 1024 // 8)}


def broker_in(
    bdir: Path, node_id: int, port: int, controller_port: int, rack: str | None
) -> BrokerInfo:
    """A broker not started yet whose files live under ``bdir``: its log dir ``data/``,
    ``server.properties`` and ``logs/server.log``."""
    return BrokerInfo(
        node_id=node_id,
        host=HOST,
        port=port,
        controller_port=controller_port,
        rack=rack,
        pid=None,
        log_dir=str(bdir / "data"),
        config_file=str(bdir / "server.properties"),
        log_file=str(bdir / "logs" / "server.log"),
    )


def read_broker_config(b: BrokerInfo) -> dict[str, str]:
    """The settings in broker ``b``'s server.properties."""
    return _read_properties(Path(b.config_file))


def _read_properties(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


# Kafka's listeners setting: "PLAINTEXT://127.0.0.1:18700,CONTROLLER://127.0.0.1:18701".
_LISTENER = re.compile(r"([A-Za-z_]+)://[^,]*:([0-9]+)")


def _broker_on_disk(bdir: Path) -> BrokerInfo:
    """The broker whose files ``local up`` (or ``add-broker``) wrote under ``bdir``, as
    its ``server.properties`` tells: node id, ports and rack (no pid)."""
    config_file = bdir / "server.properties"
    try:
        config = _read_properties(config_file)
        listeners = {name: int(port) for name, port in _LISTENER.findall(config["listeners"])}
        node_id = int(config["node.id"])
        port = listeners["PLAINTEXT"]
    except (OSError, KeyError, ValueError) as exc:
        raise LocalFleetError(
            f"cannot read the stopped broker in {bdir} ({config_file}: {exc}): delete the "
            f"fleet's data with `streamplane local down --purge --data-dir "
            f"{shlex.quote(str(bdir.parent.parent))}`"
        ) from exc
    controller_port = listeners.get("CONTROLLER", 0)
    return broker_in(bdir, node_id, port, controller_port, config.get("broker.rack"))


def _meta_properties(b: BrokerInfo) -> Path:
    return Path(b.log_dir) / "meta.properties"


def _formatted_cluster_id(b: BrokerInfo) -> str | None:
    """The cluster id broker ``b``'s storage was formatted with, None if not formatted."""
    try:
        return _read_properties(_meta_properties(b)).get("cluster.id")
    except (OSError, UnicodeDecodeError):
        return None


def _is_formatted(b: BrokerInfo) -> bool:
    return _meta_properties(b).is_file()


def _write_properties(path: Path, config: Mapping[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))


def write_broker_files(b: BrokerInfo, peers: list[BrokerInfo], spec: FleetSpec) -> None:
    bdir = Path(b.config_file).parent
    (bdir / "logs").mkdir(parents=True, exist_ok=True)
    n = len(peers)
    voters = ",".join(f"{p.node_id}@{p.host}:{p.controller_port}" for p in peers)
    internal_rf = str(replication_factor(n))
    config: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(b.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{b.host}:{b.port},CONTROLLER://{b.host}:{b.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{b.host}:{b.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": b.log_dir,
        "offsets.topic.replication.factor": internal_rf,
        "transaction.state.log.replication.factor": internal_rf,
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": internal_rf,
        "share.coordinator.state.topic.min.isr": "1",
        **BASE_BROKER_CONFIG,
        **_heap_sized_broker_config(spec.heap_mb),
        **spec.broker_config,
    }
    if b.rack is not None:
        config["broker.rack"] = b.rack
    _write_properties(Path(b.config_file), config)
    (bdir / "log4j2.properties").write_text(_LOG4J2.format(log_file=b.log_file))


def write_broker_only_files(b: BrokerInfo, template: BrokerInfo) -> None:
    """The files of broker ``b`` with the broker role only (``add-broker``): broker
    ``template``'s settings with the node id, listener, log dir and rack changed; the
    controller quorum stays ``template``'s."""
    bdir = Path(b.config_file).parent
    (bdir / "logs").mkdir(parents=True, exist_ok=True)
    config = read_broker_config(template)
    config.update(
        {
            "process.roles": "broker",
            "node.id": str(b.node_id),
            "listeners": f"PLAINTEXT://{b.host}:{b.port}",
            "advertised.listeners": f"PLAINTEXT://{b.host}:{b.port}",
            "log.dirs": b.log_dir,
        }
    )
    config.pop("broker.rack", None)
    if b.rack is not None:
        config["broker.rack"] = b.rack
    _write_properties(Path(b.config_file), config)
    (bdir / "log4j2.properties").write_text(_LOG4J2.format(log_file=b.log_file))


def _write_cluster_files(cluster: ClusterInfo, spec: FleetSpec) -> None:
    """Write the files of every broker of ``cluster`` from ``spec``: its controllers'
    (``write_broker_files``), then those of the brokers ``add-broker`` added."""
    voters = controllers(cluster)
    for b in voters:
        write_broker_files(b, voters, spec)
    for b in cluster.brokers:
        if not b.controller_port:
            write_broker_only_files(b, voters[0])


_LOG4J2 = """\
status = warn
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = {log_file}
appender.file.filePattern = {log_file}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 2
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def _log_args(b: BrokerInfo) -> list[str]:
    bdir = Path(b.config_file).parent
    return [
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={bdir / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={bdir / 'logs'}",
    ]


def _broker_jvm_args(b: BrokerInfo, heap_mb: int) -> list[str]:
    return [
        f"-Xmx{heap_mb}m",
        f"-Xms{min(heap_mb, 128)}m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:+ExitOnOutOfMemoryError",
        *_log_args(b),
    ]


def _format_all(java: str, classpath: str, clusters: Iterable[ClusterInfo]) -> None:
    """Format every broker's storage, all formatter JVMs in parallel."""
    procs: list[tuple[BrokerInfo, subprocess.Popen[str]]] = []
    for cluster in clusters:
        for b in cluster.brokers:
            cmd = [
                java,
                "-Xmx256m",
                "-XX:TieredStopAtLevel=1",
                *_log_args(b),
                "-cp",
                classpath,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster.cluster_id,
                "-c",
                b.config_file,
                "--ignore-formatted",
            ]
            procs.append(
                (
                    b,
                    subprocess.Popen(
                        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                    ),
                )
            )
    errors = []
    for b, p in procs:
        out, _ = p.communicate(timeout=120)
        if p.returncode != 0:
            last = out.strip().splitlines()[-1:] or ["(no output)"]
            errors.append(f"broker {b.node_id}: {last[0]}")
    if errors:
        raise LocalFleetError("formatting Kafka storage failed: " + "; ".join(errors))


def _launch(java: str, classpath: str, b: BrokerInfo, heap_mb: int) -> int:
    bdir = Path(b.config_file).parent
    (bdir / "logs").mkdir(parents=True, exist_ok=True)
    with open(bdir / "logs" / "stdout.log", "ab") as out:
        proc = subprocess.Popen(
            [java, *_broker_jvm_args(b, heap_mb), "-cp", classpath, "kafka.Kafka", b.config_file],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    return proc.pid


def _pid_alive(pid: int) -> bool:
    try:
        # Reap it if it is our (zombie) child.
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_our_broker(pid: int | None, config_file: str) -> bool:
    """True if ``pid`` is alive and is the broker started with ``config_file``."""
    if pid is None or not _pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return config_file.encode() in cmdline


def _wait_dead(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def _stop_pid(pid: int | None, config_file: str, grace_s: float) -> None:
    if not _is_our_broker(pid, config_file):
        return
    assert pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_dead(pid, grace_s):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_dead(pid, 5.0)
