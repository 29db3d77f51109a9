"""A stream's routing table, cached and kept fresh by a long-poll watch.

The watcher fetches the table once (``start``), then a daemon thread long-polls the
control plane and hands every newer table to the listeners, usually within a second of
the change. If the control plane goes away the cached table stays in force
(fail-static: one warning) and the thread retries with backoff until it answers again
(one INFO line). When the control plane says the stream no longer exists (it was
deleted), the watch ends and ``gone`` says why: producers refuse new records from then
on. ``refresh`` fetches the table at once (a producer asked for a lane it does not know:
maybe added a moment ago); tables reach the listeners in epoch order, each once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.core.routing import RoutingTable
from streamplane.exceptions import ControlPlaneError, ControlPlaneUnavailable, NotFound

log = logging.getLogger(__name__)

Listener = Callable[[RoutingTable], None]


class RoutingWatcher:
    def __init__(
        self,
        client: ControlPlaneClient,
        stream: str,
        *,
        poll_timeout_s: float = 20.0,
        max_backoff_s: float = 2.0,
    ) -> None:
        self._client = client
        self._stream = stream
        self._poll_timeout_s = poll_timeout_s
        self._max_backoff_s = max_backoff_s
        self._listeners: list[Listener] = []
        self._gone_listeners: list[Callable[[str], None]] = []
        self._table: RoutingTable | None = None
        self._offering = threading.Lock()  # one table at a time to the listeners
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.connected = False
        self.gone: str | None = None  # why the stream is no more (deleted), once told

    @property
    def table(self) -> RoutingTable:
        if self._table is None:
            raise RuntimeError("RoutingWatcher.start() was not called")
        return self._table

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def add_gone_listener(self, listener: Callable[[str], None]) -> None:
        """Called (from the watch thread) with ``gone`` when the stream is deleted."""
        self._gone_listeners.append(listener)

    def start(self) -> RoutingTable:
        """Fetch the table (raises if the control plane cannot be reached) and start watching."""
        self._table = self._client.routing(self._stream)
        self.connected = True
        self._thread = threading.Thread(
            target=self._run, name=f"routing-watch-{self._stream}", daemon=True
        )
        self._thread.start()
        return self._table

    def refresh(self) -> RoutingTable:
        """Fetch the table now (raises if the control plane cannot be reached) and, if
        it is newer, hand it to the listeners (on this thread) before the watch does."""
        self._offer(self._client.routing(self._stream))
        return self.table

    def _offer(self, table: RoutingTable) -> None:
        """Make ``table`` the current one and tell the listeners, if it is newer."""
        with self._offering:
            if table.epoch <= self.table.epoch:
                return
            self._table = table
            for listener in self._listeners:
                try:
                    listener(table)
                except Exception:  # a listener's bug must not stop the watch
                    log.exception("routing listener failed")

    def stop(self) -> None:
        """Stop watching. The thread may sit in its long poll for up to
        ``poll_timeout_s`` more; it lets go of the listeners now, so a closed producer
        or consumer (and the records it still buffers) is freed at once, not then."""
        self._stop.set()
        self._listeners = []
        self._gone_listeners = []

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            current = self.table
            try:
                table = self._client.watch_routing(
                    self._stream, current.epoch, timeout=self._poll_timeout_s
                )
                if not self.connected:
                    log.info(
                        "routing watch for %s: the control plane answers again (epoch %d)",
                        self._stream,
                        table.epoch,
                    )
                self.connected = True
                backoff = 0.1
            except ControlPlaneUnavailable:
                if self.connected and not self._stop.is_set():
                    log.warning(
                        "routing watch for %s: control plane unreachable: keeping routing epoch %d",
                        self._stream,
                        current.epoch,
                    )
                self.connected = False
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)
                continue
            except NotFound as exc:
                if not self._stop.is_set():
                    self.gone = gone = f"stream {self._stream!r} was deleted ({exc})"
                    log.warning("%s: the routing watch ends", gone)
                    for on_gone in self._gone_listeners:
                        try:
                            on_gone(gone)
                        except Exception:
                            log.exception("routing listener failed")
                return
            except ControlPlaneError as exc:
                if not self._stop.is_set():
                    log.warning("routing watch for %s failed: %s", self._stream, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)
                continue
            if self._stop.is_set():
                break
            if table.epoch > current.epoch:
                self._offer(table)  # (unless ``refresh`` has already)
            elif table.epoch < current.epoch:
                # A control plane restored from an older state: keep ours, but say so.
                log.warning(
                    "control plane returned an older epoch %d < %d", table.epoch, current.epoch
                )
                time.sleep(0.5)
