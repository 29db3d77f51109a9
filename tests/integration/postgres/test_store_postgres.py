"""The control-plane store on a real PostgreSQL: migrations, compare-and-set, failover
state, and the advisory-lock leadership."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from streamplane.controlplane.failover_store import FailoverStore
from streamplane.controlplane.leadership import AdvisoryLockLeadership, leadership_for
from streamplane.controlplane.migrations import LATEST_VERSION
from streamplane.controlplane.store import AuditEntry, Store, StreamRecord, utcnow
from streamplane.core.routing import SegmentState, move_lanes, new_routing_table, transition
from streamplane.exceptions import Conflict
from tests.waiting import wait_for


def _stream(store: Store, name: str = "orders") -> None:
    table = new_routing_table(name, ["realtime"], "local-a", 3)
    record = StreamRecord(name, table.lanes, 3, 1, 1, {}, 1024, 1, utcnow())
    store.add_stream(record, table, AuditEntry("t", "stream.create", name))


def test_migrations_and_compare_and_set(pg_url: str) -> None:
    store = Store(pg_url)
    try:
        assert store.schema_version() == LATEST_VERSION
        assert Store(pg_url).schema_version() == LATEST_VERSION  # a second replica: no-op
        _stream(store)
        table = store.routing("orders")
        moved = move_lanes(table, ["realtime"], "local-b", 6)
        results: list[str] = []

        def save() -> None:
            try:
                store.save_routing(moved, 1, AuditEntry("t", "stream.failover", "orders"))
                results.append("ok")
            except Conflict:
                results.append("conflict")

        threads = [threading.Thread(target=save) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["conflict", "conflict", "conflict", "ok"]
        assert store.routing("orders") == moved
        sealed = transition(
            moved, "sp.orders.realtime.e1", "local-a", SegmentState.SEALED, {0: 5, 1: 0, 2: 7}
        )
        store.save_routing(sealed, 2, AuditEntry("t", "segment.transition", "orders"))
        assert store.routing("orders") == sealed
    finally:
        store.close()


def test_failover_state(pg_url: str) -> None:
    store = Store(pg_url)
    fstore = FailoverStore(store.engine)
    try:
        _stream(store)
        fstore.record_heartbeat("orders", "p1", 1)
        fstore.record_heartbeat("orders", "p1", 2)
        fstore.record_heartbeat("orders", "p2", 2)
        assert fstore.live_producers("orders", 60) == {"p1": 2, "p2": 2}
        fstore.record_drained("orders", "local-a", "sp.orders.realtime.e1", "g1")
        fstore.record_drained("orders", "local-a", "sp.orders.realtime.e1", "g1")
        assert fstore.drained_groups("orders", "local-a", "sp.orders.realtime.e1") == {"g1"}
        fstore.save_health("local-a", "down", utcnow(), "x" * 5000, "r1")
        rec = fstore.health()["local-a"]
        assert (rec.health, len(rec.last_error or ""), rec.replica) == ("down", 1000, "r1")
        assert fstore.streams_with(SegmentState.ACTIVE) == ["orders"]
    finally:
        store.close()


def test_one_leader_and_takeover(pg_url: str) -> None:
    Store(pg_url).close()
    first = leadership_for(pg_url, interval=0.1)
    second = AdvisoryLockLeadership(pg_url, interval=0.1)
    assert isinstance(first, AdvisoryLockLeadership)
    first.start()
    second.start()
    try:
        assert first.is_leader and not second.is_leader
        first.stop()  # releases the lock
        for _ in range(100):
            if second.is_leader:
                break
            threading.Event().wait(0.1)
        assert second.is_leader
    finally:
        first.stop()
        second.stop()


# A leader in a process of its own that prints "leader" / "follower" as it changes.
_LEADER_PROCESS = """
import sys, time
from streamplane.controlplane.leadership import AdvisoryLockLeadership
lead = AdvisoryLockLeadership(sys.argv[1], interval=0.1, lease=2.0)
lead.start()
was = None
while True:
    if lead.is_leader != was:
        was = lead.is_leader
        print("leader" if was else "follower", flush=True)
    time.sleep(0.02)
"""


def test_a_stopped_leader_loses_the_lock_after_its_lease(pg_url: str) -> None:
    """A leader that stops running without dying (SIGSTOP: hung, swapped out) used to
    keep the lock until its process died; its session now ends after the lease."""
    Store(pg_url).close()
    proc = subprocess.Popen(
        [sys.executable, "-c", _LEADER_PROCESS, pg_url], stdout=subprocess.PIPE, text=True
    )
    second = AdvisoryLockLeadership(pg_url, interval=0.1, lease=2.0)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "leader"  # it decides before start returns
        second.start()
        assert not second.is_leader
        os.kill(proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        wait_for("a takeover from the stopped leader", lambda: second.is_leader, 15.0)
        took_over = time.monotonic() - stopped
        assert took_over > 1.0  # not before the lease ran out
        os.kill(proc.pid, signal.SIGCONT)
        # Running again, it finds its session ended and steps down.
        assert proc.stdout.readline().strip() == "follower"
        assert second.is_leader
    finally:
        second.stop()
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_is_always_the_leader(tmp_path: object, backend: str) -> None:
    lead = leadership_for(f"{backend}:///{tmp_path}/cp.db")
    lead.start()
    assert lead.is_leader
    lead.stop()
