"""RoutingWatcher.stop lets go of its listeners while the thread still sits in a long
poll: a closed producer or consumer must not stay alive (with the records it buffers)
until the poll times out."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import cast

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.routing_watch import RoutingWatcher
from streamplane.core.routing import RoutingTable, move_lanes, new_routing_table


class LongPoll:
    """A control plane whose watch answers (with a newer epoch) only when released."""

    def __init__(self) -> None:
        self.table = new_routing_table("orders", ["realtime"], "local-a", 3)
        self.polling = threading.Event()
        self.release = threading.Event()

    def routing(self, stream: str) -> RoutingTable:
        return self.table

    def watch_routing(self, stream: str, after_epoch: int, timeout: float = 25.0) -> RoutingTable:
        self.polling.set()
        self.release.wait(10)
        return move_lanes(self.table, ["realtime"], "local-b", None)


class Owner:
    """Stands for a StreamConsumer: it listens through a bound method."""

    def __init__(self) -> None:
        self.tables: list[RoutingTable] = []

    def on_routing(self, table: RoutingTable) -> None:
        self.tables.append(table)


def test_a_stopped_watcher_holds_no_listener_and_calls_none() -> None:
    control_plane = LongPoll()
    watcher = RoutingWatcher(cast(ControlPlaneClient, control_plane), "orders")
    owner = Owner()
    watcher.add_listener(owner.on_routing)
    watcher.start()
    assert control_plane.polling.wait(10)
    tables = owner.tables
    gone = weakref.ref(owner)

    watcher.stop()
    del owner
    gc.collect()
    assert gone() is None  # freed while the poll is still open

    control_plane.release.set()  # the poll answers a newer epoch after the stop
    assert watcher._thread is not None
    watcher._thread.join(10)
    assert not watcher._thread.is_alive()
    assert tables == []  # no listener ran after stop
