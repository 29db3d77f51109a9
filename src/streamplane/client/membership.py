"""A consumer's membership of its group: heartbeats to the Assigner, leases, releases.

A daemon thread heartbeats every ``interval_s`` with the member's load and the units it
holds (its *claims*, so a restarted control plane can rebuild who holds what) and the
units it has let go of. The consuming thread reads ``owned`` and ``release`` and calls
``released(...)`` once it has stopped and committed units.

Fail-static: while the control plane cannot be reached, the last answer stays in force
and the member keeps its work; the thread keeps trying and resyncs when it answers.

Fencing: once no heartbeat has been answered for the lease (by our own clock, less
``LEASE_MARGIN_S``), our units may have moved on. Unless the control plane could not be
reached, the consumer then commits nothing (``may_commit``); unless it could not be
reached or said that the Assigner cannot answer now (503), it hands out nothing either
(``lease_lapsed``): until a heartbeat answers and says which units are still ours. A
process that was stopped (SIGSTOP, a paused VM) or starved is there when it runs again.
If the control plane had expired the member meanwhile, the answer says it was admitted
again (``joined``): the units it lists may have had another holder since, even those it
held before, and the consumer reads them afresh from their committed state
(``take_regranted``).

Releases: a unit the Assigner asks back stays this member's to finish until it is
handed back (``released``), or until its release deadline (``release_deadline``): the
Assigner moves it ``RELEASE_TIMEOUT_S`` after it asked for it, which was no earlier
than the send of the last heartbeat answered before, so the consumer counts from there
(less ``LEASE_MARGIN_S``); asked back again after it was kept, from the new request. A
unit handed back is left out of ``owned`` and ``release`` until the answer to the
heartbeat that reported it is applied: an answer sent before says nothing of it.

Logged: joining the group and every change of the assignment (units gained, asked
back, handed back or lost: counts and a few names) at INFO, a refused heartbeat at
WARNING (once per cause); nothing per heartbeat.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.partition_state import PartitionKey
from streamplane.core.assignment import RELEASE_TIMEOUT_S
from streamplane.core.text import counted
from streamplane.exceptions import ControlPlaneError, ControlPlaneUnavailable, Unauthorized

log = logging.getLogger(__name__)

# A member stops committing a little before its lease runs out on the control plane.
LEASE_MARGIN_S = 0.2


def unit_json(k: PartitionKey) -> dict[str, Any]:
    return {"cluster": k.cluster, "topic": k.topic, "partition": k.partition}


def unit_key(d: Mapping[str, Any]) -> PartitionKey:
    return PartitionKey(str(d["cluster"]), str(d["topic"]), int(d["partition"]))


def units_text(keys: Iterable[PartitionKey], shown: int = 4) -> str:
    """``2 work units (local-a/sp.s.realtime.e1/0, local-a/sp.s.realtime.e1/3)``: a
    count and the first few, for a log line."""
    names = sorted(f"{k.cluster}/{k.topic}/{k.partition}" for k in keys)
    if not names:
        return "no work unit"
    more = f", +{len(names) - shown} more" if len(names) > shown else ""
    return f"{counted(len(names), 'work unit')} ({', '.join(names[:shown])}{more})"


class CpuMeter:
    """This process's CPU use (0..1 of one core per core available) since the last call."""

    def __init__(self) -> None:
        self._last = (time.monotonic(), time.process_time())
        self._cores = max(1, len(os.sched_getaffinity(0)))

    def __call__(self) -> float:
        now = (time.monotonic(), time.process_time())
        wall = now[0] - self._last[0]
        busy = now[1] - self._last[1]
        self._last = now
        return 0.0 if wall <= 0 else min(1.0, busy / wall / self._cores)


class GroupMembership:
    def __init__(
        self,
        client: ControlPlaneClient,
        group: str,
        stream: str,
        lanes: Sequence[str],
        *,
        member_id: str | None = None,
        interval_s: float = 0.3,
        load: Callable[[], tuple[float, float, list[dict[str, Any]]]] | None = None,
    ) -> None:
        self._client = client
        self.group = group
        self.stream = stream
        # The lanes its heartbeats name: replaced whole by a consumer of every lane that
        # takes on a lane added to the stream (the Assigner then grows the group's units).
        self.lanes = list(lanes)
        self.member_id = member_id or f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.interval_s = interval_s
        self._cpu = CpuMeter()
        self._load = load or (lambda: (self._cpu(), 0.0, []))
        self._lock = threading.Lock()
        # The units the last answer lists as ours, and those to give back: one tuple,
        # replaced whole, so a reader never sees one answer's half with another's.
        self._units: tuple[frozenset[PartitionKey], frozenset[PartitionKey]] = (
            frozenset(),
            frozenset(),
        )
        # Units handed back (``released``), until the answer to the heartbeat that
        # carried them is applied: hidden from ``assignment`` meanwhile.
        self._released: set[PartitionKey] = set()
        # When each unit of ``release`` must be handed back at the latest, by our clock
        # (``release_deadline``); replaced whole by each answer.
        self._release_by: dict[PartitionKey, float] = {}
        self._answered_sent = 0.0  # when the last heartbeat answered was sent (monotonic)
        # Units granted by an answer that admitted us again (our lease had expired on the
        # control plane), until the consumer takes them (``take_regranted``).
        self._regranted: frozenset[PartitionKey] = frozenset()
        self._admitted = False  # a heartbeat was answered (the first one admits us)
        self.generation = -1
        self._lease_deadline = 0.0
        self._lease_s = 0.0  # the last answer's lease
        self._last_sent = 0.0  # when the last heartbeat was sent (monotonic)
        self.connected = False
        # The last heartbeat got no answer from the Assigner: the control plane could not
        # be reached, or answered 503 (leadership moving, its store away). Fail-static:
        # a lapsed lease does not stop hand-out then (``lease_lapsed``).
        self._assigner_away = False
        self._failing = ""  # the last heartbeat error logged, until one is answered
        # The control plane refuses our API token (401/403: it was rotated without the
        # old one kept as a previous token), until a heartbeat is answered: once our lease
        # has lapsed the consumer raises it rather than hand out nothing for good.
        self.refused: Unauthorized | None = None
        self.changed = threading.Event()
        self._beat_done = threading.Event()  # set after every heartbeat, answered or not
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def owned(self) -> frozenset[PartitionKey]:
        return self.assignment()[0]

    @property
    def release(self) -> frozenset[PartitionKey]:
        return self.assignment()[1]

    def assignment(self) -> tuple[frozenset[PartitionKey], frozenset[PartitionKey]]:
        """``(owned, release)`` as one answer gave them, less the units handed back
        (``released``) that no answer has spoken of since: until the answer to the
        heartbeat that carries them is applied, what an earlier answer says of them is
        out of date. (An answer sent before a unit was handed back, keeping it here
        after all, had it read again while the next heartbeat handed it back: the
        Assigner then gave it to another member, and both read it.)"""
        with self._lock:
            owned, release = self._units
            handed_back = self._released
            if not handed_back:
                return owned, release
            return owned - handed_back, release - handed_back

    def release_deadline(self, key: PartitionKey) -> float | None:
        """When ``key``, asked back, must be handed back at the latest (monotonic, our
        clock): the Assigner gives it to another member ``RELEASE_TIMEOUT_S`` after it
        asked for it. None if the Assigner has not asked for it."""
        return self._release_by.get(key)

    def take_regranted(self) -> frozenset[PartitionKey]:
        """The units granted since the last call by answers that admitted this member
        again after its lease expired on the control plane: whatever the consumer holds
        of them is stale (another member may have read and committed them meanwhile).
        Take them before ``assignment()``: an answer updates them first."""
        with self._lock:
            regranted, self._regranted = self._regranted, frozenset()
        return regranted

    def may_commit(self) -> bool:
        """False once our lease has run out while the control plane answers (fenced)."""
        return not self.connected or time.monotonic() < self._lease_deadline

    def lease_lapsed(self) -> bool:
        """True while our lease may have run out on the control plane (no heartbeat
        answered for the lease time, by our clock) and the Assigner was not found away:
        our units may have moved on, so none of their records may be handed out until a
        heartbeat answers (``await_heartbeat``) and says which we still own (``owned``
        and ``changed`` are updated before the lease is renewed)."""
        return not self._assigner_away and time.monotonic() >= self._lease_deadline

    def await_heartbeat(self, timeout: float) -> None:
        """Wait up to ``timeout`` for a heartbeat to end. One is sent at once unless the
        last one was sent recently enough for its answer to renew the lease (so a caller
        polling in a loop does not send one after another)."""
        self._beat_done.clear()
        if time.monotonic() >= self._last_sent + self._lease_s - LEASE_MARGIN_S:
            self._wake.set()
        if timeout > 0:
            self._beat_done.wait(timeout)

    def start(self) -> None:
        """The first heartbeat (raises if the control plane cannot be reached), then the loop."""
        self._beat()
        self._thread = threading.Thread(
            target=self._run, name=f"membership-{self.group}", daemon=True
        )
        self._thread.start()

    def released(self, keys: Iterable[PartitionKey]) -> None:
        """The consumer stopped and committed these units: report them next heartbeat."""
        with self._lock:
            self._released.update(keys)
        self._wake.set()

    def stop(self, leave: bool = True) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)
        if leave:
            try:
                self._client.leave_group(self.group, self.member_id)
            except ControlPlaneError as exc:
                log.info("could not leave group %s cleanly: %s", self.group, exc)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._beat()
            except ControlPlaneUnavailable:
                if self.connected:
                    log.warning("control plane unreachable: keeping %d work units", len(self.owned))
                self.connected = False
                self._assigner_away = True
            except ControlPlaneError as exc:
                # 503 (a follower that knows no leader, leadership moving, the store not
                # answering; or a proxy's 502/504): the Assigner cannot answer now, and
                # the member keeps its units as when unreachable. Any other error is the
                # control plane refusing the heartbeat: nothing renews our lease.
                self._assigner_away = exc.status in (502, 503, 504)
                self.refused = exc if isinstance(exc, Unauthorized) else None
                if str(exc) != self._failing:  # once per cause, not every 0.3 s
                    log.warning(
                        "heartbeat of %s (group %s) %s: %s",
                        self.member_id,
                        self.group,
                        "failed" if self._assigner_away else "refused: its lease is not renewed",
                        exc,
                    )
                    self._failing = str(exc)
            else:
                self.refused = None
                if self._failing:
                    log.info("heartbeats of %s answered again", self.member_id)
                    self._failing = ""
            finally:
                self._beat_done.set()

    def _beat(self) -> None:
        with self._lock:
            released = set(self._released)
        cpu, rate, units = self._load()
        sent_at = self._last_sent = time.monotonic()
        answer = self._client.group_heartbeat(
            self.group,
            self.member_id,
            self.stream,
            self.lanes,
            cpu=cpu,
            records_per_s=rate,
            units=units,
            released=[unit_json(k) for k in released],
            # (a unit asked back is still ours until we hand it back: a restarted
            # Assigner must not give it to another member while we finish its records)
            claims=[unit_json(k) for k in (self.owned | self.release) - released],
        )
        owned = frozenset(unit_key(u) for u in answer["work_units"])
        release = frozenset(unit_key(u) for u in answer["release"])
        lease_s = float(answer["lease_s"])
        rejoined = bool(answer.get("joined", False)) and self._admitted
        if rejoined:
            # Our lease had expired on the control plane: every unit we are given may have
            # had another holder since. Recorded before the units and the lease.
            with self._lock:
                self._regranted |= owned
            log.warning(
                "%s was admitted to group %s again (its lease had expired on the control "
                "plane): its %s are read afresh from their committed state",
                self.member_id,
                self.group,
                counted(len(owned), "work unit"),
            )
        if release:
            # A unit newly asked back was asked for after the last answer (which did not
            # list it), so no earlier than that heartbeat was sent.
            asked_by = self._answered_sent if self._admitted else sent_at
            self._release_by = {
                k: self._release_by.get(k, asked_by + RELEASE_TIMEOUT_S - LEASE_MARGIN_S)
                for k in release
            }
        elif self._release_by:
            self._release_by = {}
        if not self._admitted:
            log.info(
                "%s joined group %s (stream %s): %s",
                self.member_id,
                self.group,
                self.stream,
                units_text(owned),
            )
        elif not rejoined and (owned, release) != self._units:
            self._log_change(owned, release, released)
        if rejoined or (owned, release) != self._units:
            # Before the lease is renewed: a consumer whose lease lapsed hands out
            # records again only once it has seen which units it lost (``lease_lapsed``).
            with self._lock:  # with the units: this answer speaks of those handed back
                self._units = (owned, release)
                self._released -= released
            self.generation = int(answer["generation"])
            self.changed.set()
        elif released:
            with self._lock:
                self._released -= released
            if released & (owned | release):
                self.changed.set()  # shown again (``assignment``): ours after all
        self._answered_sent = sent_at
        self._lease_s = lease_s
        self._lease_deadline = sent_at + lease_s - LEASE_MARGIN_S
        self.connected = True
        self._admitted = True
        self._assigner_away = False
        if lease_s > 0 and self.interval_s > lease_s / 2:
            # Beating once a lease (or less often) the member would lose its units
            # between beats: heartbeat three times a lease instead.
            log.warning(
                "heartbeat interval %.2f s is too long for the control plane's %.2f s "
                "lease: heartbeating every %.2f s",
                self.interval_s,
                lease_s,
                lease_s / 3,
            )
            self.interval_s = lease_s / 3

    def _log_change(
        self,
        owned: frozenset[PartitionKey],
        release: frozenset[PartitionKey],
        released: set[PartitionKey],
    ) -> None:
        """One line for a change of the assignment: the units gained, kept after all,
        asked back, handed back (with this heartbeat), taken while still being released
        (their release time was over) and lost (taken without a release: our lease on
        them had run out on the control plane)."""
        before, releasing_before = self._units
        gone = releasing_before - release - owned
        changes = [
            ("gained", owned - before - releasing_before),
            ("kept (no longer asked back)", owned & releasing_before),
            ("asked back", release - releasing_before),
            ("handed back", gone & released),
            ("taken at the end of the release time", gone - released),
            ("lost", before - owned - release),
        ]
        said = [f"{what} {units_text(keys)}" for what, keys in changes if keys]
        if said:
            log.info(
                "%s (group %s): %s; holds %s",
                self.member_id,
                self.group,
                "; ".join(said),
                counted(len(owned), "work unit"),
            )
