"""Which control-plane replica is the leader (runs the health loop and the sealer).

Every replica serves reads and writes (writes are compare-and-set on the epoch); only
the leader runs the background tasks, so two replicas never fail the same cluster over
twice or race to seal a segment.

- SQLite (one replica per file): the replica is always the leader (``SingleReplica``).
- PostgreSQL: the leader holds a session-level advisory lock
  (``pg_try_advisory_lock``) on a dedicated connection. The others try to take it every
  ``interval`` seconds. When the leader's process dies, PostgreSQL closes its session
  and releases the lock, so another replica takes over within about ``interval``. A
  leader that cannot check its connection (``SELECT 1`` fails or times out) steps down
  at once: it may have lost the lock without knowing.

  Leadership is a lease of ``lease`` seconds: the lock connection is opened with
  PostgreSQL's ``idle_session_timeout`` at ``lease``, and the leader renews it with its
  ``SELECT 1`` every ``interval``. A leader that stops running without dying (stopped,
  swapped out, hung) goes quiet; PostgreSQL ends its session after ``lease`` seconds and
  the lock passes on, where before it was held until the process died. A leader that
  has not renewed within ``lease`` no longer reports itself the leader, so when it runs
  again it does not act on leadership it has lost while its next check is under way.

Becoming the leader and stepping down are each logged in one line (``serve`` shows the
``streamplane`` loggers at its ``--log-level``), and told to the listeners
(``add_listener``): the Assigner, which must not go on from what it knew as an earlier
leader, and must not mistake a promoted follower for the leader it was at start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from streamplane.controlplane.store import bound_postgresql_answers, error_line

log = logging.getLogger(__name__)

# A fixed key (any int64): "streamplane control-plane leader".
LEADER_LOCK_KEY = 0x5354_524D_4C44_0001
# A leader silent this long loses its session, hence the lock (PostgreSQL ends it).
DEFAULT_LEASE_S = 10.0


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...

    def add_listener(self, listener: Callable[[bool], None]) -> None:
        """``listener(is_leader)`` now, and at each change (gained or lost)."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class SingleReplica:
    """Always the leader (SQLite: one replica per database file)."""

    is_leader = True

    def add_listener(self, listener: Callable[[bool], None]) -> None:
        listener(True)  # it never changes

    def start(self) -> None:
        log.info("this replica is the leader (a single replica: SQLite, one per database file)")

    def stop(self) -> None:
        pass


class AdvisoryLockLeadership:
    """Leader while holding a PostgreSQL advisory lock on a dedicated connection."""

    def __init__(
        self,
        url: str,
        interval: float = 0.5,
        check_timeout_s: float = 2.0,
        lease: float = DEFAULT_LEASE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not lease > 2 * interval:
            raise ValueError(
                f"the leader's lease ({lease} s) must be more than twice its check "
                f"interval ({interval} s)"
            )
        timeout_ms = int(check_timeout_s * 1000)
        lease_ms = int(lease * 1000)
        self._engine: Engine = sa.create_engine(
            url,
            poolclass=NullPool,
            connect_args={
                "connect_timeout": max(1, int(check_timeout_s)),
                "options": (
                    f"-c statement_timeout={timeout_ms} -c idle_session_timeout={lease_ms}"
                ),
                "application_name": "streamplane-leader",
            },
        )
        if self._engine.url.get_driver_name() == "psycopg":
            # The statement timeout is the server's: a frozen server never answers the
            # check. Bounded here too, the leader steps down after check_timeout_s.
            bound_postgresql_answers(self._engine, check_timeout_s)
        self._interval = interval
        self._lease = lease
        self._clock = clock
        self._conn: Connection | None = None
        self._leader = False
        self._renewed_at = 0.0  # when the leader last confirmed its session (clock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.changes = 0  # how many times leadership was gained or lost (for tests)
        self._listeners: list[Callable[[bool], None]] = []

    @property
    def is_leader(self) -> bool:
        """Holding the lock, as confirmed within the lease (a leader that was not running
        for longer may have lost it)."""
        return self._leader and self._clock() - self._renewed_at < self._lease

    def add_listener(self, listener: Callable[[bool], None]) -> None:
        self._listeners.append(listener)
        listener(self._leader)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._tick()  # decide before serving, so a lone replica leads from the start
        if not self._leader:
            log.info("this replica is a follower (another replica leads)")
        self._thread = threading.Thread(target=self._run, name="leadership", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)
        self._release()
        self._engine.dispose()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._tick()

    def _tick(self) -> None:
        try:
            if self._conn is None:
                self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            if self._leader:
                self._conn.execute(sa.text("SELECT 1"))
                self._renewed_at = self._clock()
                return
            got = self._conn.execute(
                sa.text("SELECT pg_try_advisory_lock(:key)"), {"key": LEADER_LOCK_KEY}
            ).scalar()
            if got:
                self._renewed_at = self._clock()
                self._set(True)
        except Exception as exc:
            if self._leader:
                log.warning("leadership lost: the lock connection failed (%s)", error_line(exc))
            self._set(False)
            self._close()

    def _set(self, leader: bool) -> None:
        if leader != self._leader:
            self._leader = leader
            self.changes += 1
            if leader:
                log.info(
                    "this replica is the leader (it holds the advisory lock; it runs the "
                    "health checks and the sealer)"
                )
            else:
                log.info("this replica is a follower")
            for listener in self._listeners:
                try:
                    listener(leader)
                except Exception:
                    log.exception("a leadership listener failed")

    def _release(self) -> None:
        if self._conn is not None and self._leader:
            try:
                self._conn.execute(
                    sa.text("SELECT pg_advisory_unlock(:key)"), {"key": LEADER_LOCK_KEY}
                )
            except Exception as exc:
                log.debug("advisory unlock failed: %s", exc)
        self._set(False)
        self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception as exc:
                log.debug("closing the lock connection failed: %s", exc)


def leadership_for(url: str, interval: float = 0.5, lease: float = DEFAULT_LEASE_S) -> Leadership:
    """Advisory-lock leadership on PostgreSQL, a single replica elsewhere."""
    backend = sa.engine.make_url(url).get_backend_name()
    if backend == "postgresql":
        return AdvisoryLockLeadership(url, interval, lease=lease)
    return SingleReplica()
