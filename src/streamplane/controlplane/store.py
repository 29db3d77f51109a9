"""The control plane's state, in SQL through SQLAlchemy Core: a thin adapter.

SQLite file by default (``sqlite:///path/to/control-plane.db``); any SQLAlchemy URL
(``postgresql+psycopg://...``) works because only portable SQL is used: JSON columns,
no upserts, no dialect functions. Migrations (``migrations.py``) run when the store
opens.

Invariants kept here:

- a stream's routing table is its ``streams`` row (lanes, epoch) plus its ``segments``
  rows in ``position`` order, so ``routing()`` returns exactly what was saved;
- ``save_routing`` is a compare-and-set on the epoch: two writers (two replicas, or two
  requests) cannot both move a stream from the same epoch; the loser gets ``Conflict``;
- every routing change is written in the same transaction as its audit entry.

Domain rules (names, configs, the routing state machine) are not checked here: the
service does that with ``streamplane.core.routing``.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles

from streamplane.controlplane.migrations import current_version, migrate
from streamplane.core.routing import RoutingTable, Segment, SegmentState
from streamplane.exceptions import ConfigError, Conflict, NotFound

log = logging.getLogger(__name__)

_md = sa.MetaData()

clusters = sa.Table(
    "clusters",
    _md,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("bootstrap", sa.String(1024), nullable=False),
    sa.Column("tags", sa.JSON, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    # The Kafka cluster the name stands for (null: not known yet, see ClusterRecord).
    sa.Column("kafka_cluster_id", sa.String(255), nullable=True),
)

streams = sa.Table(
    "streams",
    _md,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("lanes", sa.JSON, nullable=False),
    sa.Column("partitions", sa.Integer, nullable=False),
    sa.Column("dlq_partitions", sa.Integer, nullable=False),
    sa.Column("replication_factor", sa.Integer, nullable=False),
    sa.Column("config", sa.JSON, nullable=False),
    sa.Column("max_record_bytes", sa.BigInteger, nullable=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

segments = sa.Table(
    "segments",
    _md,
    sa.Column("stream", sa.String(63), primary_key=True),
    sa.Column("cluster", sa.String(63), primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("lane", sa.String(31), nullable=False),
    sa.Column("partitions", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("sealed_end_offsets", sa.JSON, nullable=False),
)

# The last epoch of each deleted stream: a stream made again under its name goes on
# from there, so clients still watching the old one (after_epoch=N) follow it, and the
# new topics (named by epoch) never meet topics kept from the old one.
deleted_stream_epochs = sa.Table(
    "deleted_stream_epochs",
    _md,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("epoch", sa.BigInteger, nullable=False),
)

audit_log = sa.Table(
    "audit_log",
    _md,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("actor", sa.String(100), nullable=False),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("stream", sa.String(63), nullable=True),
    sa.Column("detail", sa.JSON, nullable=False),
)


def utcnow() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    """``value`` as a UTC datetime. SQLite gives naive datetimes back (everything stored
    is UTC); PostgreSQL gives them in the session's time zone."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class bytewise(sa.sql.functions.FunctionElement[str]):
    """A name column compared by code point (UTF-8 byte order), whatever the database's
    collation: ``ORDER BY bytewise(name)`` lists in the same order on SQLite (whose
    default collation, BINARY, is byte order) and on PostgreSQL (``COLLATE "C"``)."""

    inherit_cache = True
    name = "bytewise"
    type = sa.String()


@compiles(bytewise)
def _bytewise(element: bytewise, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.clauses, **kw))


@compiles(bytewise, "postgresql")
def _bytewise_postgresql(element: bytewise, compiler: Any, **kw: Any) -> str:
    return f'{compiler.process(element.clauses, **kw)} COLLATE "C"'


@dataclass(frozen=True)
class ClusterRecord:
    """A registered cluster. ``kafka_cluster_id`` is the Kafka cluster the name stands
    for, as it answered at registration or at its last bootstrap change; None while not
    known (registered before schema version 9, or forced while its bootstrap did not
    answer): then it is recorded the first time the cluster answers at its bootstrap."""

    name: str
    bootstrap: str
    tags: Mapping[str, str]
    created_at: datetime
    updated_at: datetime
    kafka_cluster_id: str | None = None


@dataclass(frozen=True)
class StreamRecord:
    """What a stream was created with, plus its current epoch."""

    name: str
    lanes: tuple[str, ...]
    partitions: int
    dlq_partitions: int
    replication_factor: int
    config: Mapping[str, str]  # the user's topic configs (without the ones streamplane sets)
    max_record_bytes: int
    epoch: int
    created_at: datetime


@dataclass(frozen=True)
class AuditEntry:
    actor: str
    action: str
    stream: str | None
    detail: Mapping[str, Any] = field(default_factory=dict)
    time: datetime = field(default_factory=utcnow)
    id: int | None = None


# The PostgreSQL driver streamplane installs (psycopg 3). Plain ``postgresql://`` would
# load SQLAlchemy's default, psycopg2, and ``postgres://`` (what many hosts hand out)
# names no SQLAlchemy dialect at all: both mean this one.
POSTGRES_DRIVER = "postgresql+psycopg"
_POSTGRES_ALIASES = ("postgres", "postgresql")


def _parse_url(url: str) -> sa.engine.URL:
    """The parsed URL, PostgreSQL aliases mapped to the installed driver. Raises
    ``ConfigError`` (one line, password masked) for a URL that does not parse."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a port that is no number
        reason = " ".join(str(exc).split())
        if isinstance(exc, ValueError):
            reason = "the port is not a number"
        raise ConfigError(f"invalid database URL {display_url(url)!r}: {reason}") from exc
    driver = parsed.drivername
    if driver in _POSTGRES_ALIASES:
        parsed = parsed.set(drivername=POSTGRES_DRIVER)
    elif driver.startswith("postgres+"):
        parsed = parsed.set(drivername="postgresql+" + driver.split("+", 1)[1])
    return parsed


def normalize_url(url: str) -> str:
    """``url`` with ``postgres://`` and ``postgresql://`` naming the installed driver
    (``postgresql+psycopg://``); other URLs unchanged."""
    parsed = _parse_url(url)
    if parsed.drivername == sa.engine.make_url(url).drivername:
        return url
    return parsed.render_as_string(hide_password=False)


def display_url(url: str) -> str:
    """``url`` with its password masked, for messages and logs."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        # Unparsable: mask what sits between "user:" and "@" all the same.
        return re.sub(r"(://[^:/@]*:).*@", r"\1***@", url)


# How long a round trip to PostgreSQL (a statement, a commit, a connection attempt) may
# wait for its answer before the database counts as unavailable (503). A server that
# refuses or drops connections fails at once; a frozen one (a stopped process, a hung
# host) whose kernel still acknowledges the packets never answers: neither libpq's
# connect_timeout after connecting, nor a server-side statement_timeout, nor TCP
# keepalives (acknowledged too) end that wait, so the client ends it itself.
DEFAULT_ANSWER_TIMEOUT_S = 3.0


def _bounded_connection_class(answer_timeout_s: float) -> type[Any]:
    """A psycopg connection class whose every round trip gives up after
    ``answer_timeout_s``: the connection is closed (it is mid-statement: unusable; the
    pool discards it) and ``psycopg.OperationalError("did not answer in N s")`` raised,
    which SQLAlchemy reports as a lost connection, and the app as a 503."""
    import psycopg

    class BoundedConnection(psycopg.Connection[Any]):
        limit_s: float | None = None  # None while migrating (lock waits may be long)

        def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
            limit = self.limit_s
            if timeout is not None or limit is None:
                return super().wait(gen, interval=interval, timeout=timeout)
            try:
                return super().wait(gen, interval=interval, timeout=limit)
            except psycopg.OperationalError as exc:
                # psycopg's own timeout error (errors._WaitTimeout) is private: any
                # OperationalError raised after the limit passed on a live connection is it.
                if type(exc).__name__ != "_WaitTimeout":
                    raise
                self.pgconn.finish()  # psycopg's lock is held: not self.close()
                raise psycopg.OperationalError(f"did not answer in {limit:g} s") from None

    BoundedConnection.limit_s = answer_timeout_s
    return BoundedConnection


def bound_postgresql_answers(engine: Engine, answer_timeout_s: float) -> type[Any]:
    """Connect ``engine``'s PostgreSQL connections through a bounded connection class
    (connect_timeout too, unless the URL sets one). Returns the class (its ``limit_s``
    can be lifted, as while migrating)."""
    import psycopg

    conn_class = _bounded_connection_class(answer_timeout_s)
    connect_timeout = max(2, math.ceil(answer_timeout_s))  # libpq's minimum: 2 s

    @sa.event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        cparams.setdefault("connect_timeout", connect_timeout)
        try:
            return conn_class.connect(*cargs, **cparams)
        except psycopg.errors.ConnectionTimeout:
            raise psycopg.OperationalError(
                f"did not answer in {cparams['connect_timeout']} s (connecting)"
            ) from None

    return conn_class


def _engine(url: str, answer_timeout_s: float | None) -> tuple[Engine, type[Any] | None]:
    """The engine, and for PostgreSQL the bounded connection class (see
    ``bound_postgresql_answers``) its connections are made of."""
    shown = display_url(url)
    bounded: type[Any] | None = None
    parsed = _parse_url(url)
    backend = parsed.get_backend_name()
    is_sqlite = backend == "sqlite"
    if is_sqlite and (parsed.database in (None, "", ":memory:") or "mode=memory" in url):
        # Each connection of the pool would get an empty database of its own: the
        # schema made at start-up would be gone for the requests.
        raise ConfigError(
            f"database URL {shown!r}: an in-memory SQLite database is not shared between "
            "connections; give a file (sqlite:///path/to/control-plane.db)"
        )
    if is_sqlite and parsed.database:
        make_database_dir(Path(parsed.database), shown)
    options: dict[str, Any] = {}
    if backend == "postgresql" and answer_timeout_s is not None:
        # Requests wait no longer for a pooled connection than for an answer.
        options["pool_timeout"] = answer_timeout_s
    try:
        engine = sa.create_engine(parsed, **options)
    except (sa.exc.NoSuchModuleError, ModuleNotFoundError) as exc:
        raise ConfigError(
            f"database URL {shown!r}: driver not installed ({exc}); "
            f"use sqlite:///path/to/control-plane.db or {POSTGRES_DRIVER}://user@host:port/db"
        ) from exc
    if is_sqlite:

        @sa.event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")  # readers do not wait for the writer
            cur.execute("PRAGMA busy_timeout=10000")
            cur.close()

    if backend == "postgresql":
        if answer_timeout_s is not None and parsed.get_driver_name() == "psycopg":
            bounded = bound_postgresql_answers(engine, answer_timeout_s)

        @sa.event.listens_for(engine, "connect")
        def _utc_session(dbapi_conn: Any, _record: Any) -> None:
            # Timestamps come back in the session's time zone (a database or role may
            # set another one): read them in UTC. _aware() converts anyway.
            autocommit = dbapi_conn.autocommit
            dbapi_conn.autocommit = True
            try:
                cur = dbapi_conn.cursor()
                cur.execute("SET TIME ZONE 'UTC'")
                cur.close()
            finally:
                dbapi_conn.autocommit = autocommit

    return engine, bounded


def _watch_availability(engine: Engine, availability: DatabaseAvailability) -> None:
    """Tell ``availability`` of every connection failure and every answered statement,
    whoever runs it (requests, the health loop, the sealer, the watch poller)."""

    @sa.event.listens_for(engine, "handle_error")
    def _failed(context: sa.engine.ExceptionContext) -> None:
        exc = context.sqlalchemy_exception or context.original_exception
        reason = unavailable_reason(exc)
        if reason is not None:
            availability.down(reason, damaged_file_error(exc))

    @sa.event.listens_for(engine, "after_cursor_execute")
    def _answered(*_: Any) -> None:
        availability.up()


# ---------------------------------------------------------------------- outages
def _psycopg_connection_errors() -> tuple[type[BaseException], ...]:
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a dependency
        return ()
    # OperationalError: connection refused or lost, the server shutting down, a
    # statement timeout; InterfaceError: a closed connection.
    return (psycopg.OperationalError, psycopg.InterfaceError)


_PSYCOPG_CONNECTION_ERRORS = _psycopg_connection_errors()
# SQLite's result codes of a database that cannot be used now (busy or locked by another
# writer, cannot be opened, I/O error, full, read-only); "no such table" and syntax
# errors are OperationalErrors too, but SQLITE_ERROR: bugs, not outages.
_SQLITE_UNAVAILABLE = {5, 6, 7, 8, 10, 13, 14, 15}  # BUSY LOCKED NOMEM READONLY IOERR FULL ...
_SQLITE_UNAVAILABLE_TEXT = ("database is locked", "unable to open", "disk", "readonly")
# SQLite's result codes of a damaged file (pages overwritten, not a database at all): it
# does not heal, so such an outage lasts until the file is restored and serve restarted.
_SQLITE_CORRUPT = 11
_SQLITE_DAMAGED = {_SQLITE_CORRUPT, 26}  # CORRUPT NOTADB
_SQLITE_DAMAGED_TEXT = ("malformed", "file is not a database")
_REASON_MAX = 300


def _driver_unavailable(exc: BaseException | None) -> bool:
    if isinstance(exc, _PSYCOPG_CONNECTION_ERRORS):
        return True
    if isinstance(exc, sqlite3.InterfaceError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF in _SQLITE_UNAVAILABLE
        return any(t in str(exc) for t in _SQLITE_UNAVAILABLE_TEXT)
    return False


def _driver_damaged(exc: BaseException | None) -> bool:
    if not isinstance(exc, sqlite3.DatabaseError) or isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _SQLITE_DAMAGED
    return any(t in str(exc) for t in _SQLITE_DAMAGED_TEXT)


def _is_corrupt(exc: BaseException | None) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return _driver_damaged(exc) and (
        code & 0xFF == _SQLITE_CORRUPT if isinstance(code, int) else "malformed" in str(exc)
    )


def damaged_file_error(exc: BaseException) -> BaseException | None:
    """The driver's error, if ``exc`` says the database file is damaged (SQLite's
    "database disk image is malformed", "file is not a database"); else ``None``."""
    cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    return cause if isinstance(cause, BaseException) and _driver_damaged(cause) else None


def damage_reason(exc: BaseException) -> str | None:
    """One line saying the store cannot be read because its file is damaged, if ``exc``
    means that; else ``None``."""
    cause = damaged_file_error(exc)
    if cause is None:
        return None
    return f"the store cannot be read: {' '.join(str(cause).split())} (restore it from a backup)"


def unavailable_reason(exc: BaseException) -> str | None:
    """One line saying why the database does not answer, if ``exc`` means that (a
    connection refused, lost or timed out, SQLite's "database is locked", no connection
    free in the pool, a damaged SQLite file); ``None`` for any other error (a bug, a
    constraint...)."""
    damaged = damage_reason(exc)
    if damaged is not None:
        return damaged
    cause: BaseException = exc
    if isinstance(exc, sa.exc.TimeoutError):  # the pool: every connection is in use
        pass
    elif isinstance(exc, sa.exc.DBAPIError):
        orig = exc.orig
        if isinstance(orig, BaseException):
            cause = orig
        if not exc.connection_invalidated and not (
            _driver_unavailable(orig)
            or (
                isinstance(exc, sa.exc.InterfaceError)
                or (
                    isinstance(exc, sa.exc.OperationalError) and not isinstance(orig, sqlite3.Error)
                )
            )
        ):
            return None
    elif not _driver_unavailable(exc):
        return None
    reason = " ".join(str(cause).split()) or type(cause).__name__
    return reason if len(reason) <= _REASON_MAX else reason[: _REASON_MAX - 3] + "..."


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` is the database not answering: the store's ``availability`` logs
    one warning per outage (and one when it answers again), so background loops that
    meet it say nothing more."""
    return unavailable_reason(exc) is not None


def error_line(exc: BaseException) -> str:
    """``exc`` in one line for a log: a database error by its driver's message (not
    SQLAlchemy's text with the statement, its parameters and a link on further lines);
    an exception without a message by its type."""
    cause: BaseException = exc
    if isinstance(exc, sa.exc.DBAPIError) and isinstance(exc.orig, BaseException):
        cause = exc.orig
    text = " ".join(str(cause).split())
    if isinstance(cause, sa.exc.SQLAlchemyError):
        text = re.split(r" \[SQL: | \(Background on this error", text)[0]
    if not text:
        return type(cause).__name__
    if cause is not exc:
        text = f"{type(cause).__name__}: {text}"
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 3] + "..."


class DatabaseAvailability:
    """Whether the database answers, as the last statement or failure showed: one
    warning when an outage starts, one line when it answers again (not one per
    request)."""

    def __init__(self, shown_url: str) -> None:
        self._shown_url = shown_url
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self.reason: str | None = None  # while down
        self.outages = 0
        # The driver's error of a damaged file: down until it is restored and serve restarted.
        self.damage: BaseException | None = None

    @property
    def available(self) -> bool:
        return self._down_since is None

    def down(self, reason: str, damage: BaseException | None = None) -> None:
        """An outage starts (one warning), or goes on. A damaged file is no outage that
        ends: statements that miss the damaged pages still succeed, and do not make it
        "answer again" (which logged the start and the end of an outage every second)."""
        with self._lock:
            if self.damage is not None:
                return
            self.reason = reason
            self.damage = damage
            if self._down_since is not None and damage is None:
                return
            if self._down_since is None:
                self._down_since = time.monotonic()
                self.outages += 1
        if damage is not None:
            log.error(
                "database %s is damaged: %s; restore it from a backup and restart (requests "
                "that read the damaged part, and /healthz, answer 503)",
                self._shown_url,
                " ".join(str(damage).split()),
            )
            return
        log.warning(
            "database %s unavailable: %s (requests answer 503 until it answers again)",
            self._shown_url,
            reason,
        )

    def up(self) -> None:
        if self._down_since is None or self.damage is not None:  # the common case: no lock
            return
        with self._lock:
            since, self._down_since, self.reason = self._down_since, None, None
        if since is not None:
            log.warning(
                "database %s answers again (after %.1f s)",
                self._shown_url,
                time.monotonic() - since,
            )


def make_database_dir(db_file: Path, shown: str) -> None:
    """Create the directory of a SQLite file (``.streamplane/`` on a fresh checkout), but
    not a deeper path: a mistyped ``--db`` (``sqlite:////nonexistent/dir/x.db``) made its
    directories and served a new, empty registry without a word."""
    parent = db_file.parent
    if parent.is_dir():
        return
    if not parent.parent.is_dir():
        raise ConfigError(
            f"database URL {shown!r}: directory {parent.parent} does not exist (create it, "
            "or correct the path)"
        )
    try:
        parent.mkdir(exist_ok=True)
    except OSError as exc:
        raise _unwritable(parent, exc, shown) from exc


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for other databases)."""
    parsed = _parse_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    return Path(parsed.database).resolve()


# ---------------------------------------------------------------------- one replica per file
@dataclass
class DatabaseFileLock:
    """The OS lock (``flock``) on ``<database file>.lock`` one control plane holds while
    it serves a SQLite file."""

    path: Path
    handle: IO[str]
    created: bool  # this start made the file

    def close(self) -> None:
        """Release the lock (the file stays for the next start; the process's end
        releases it too)."""
        self.handle.close()

    def abandon(self) -> None:
        """Release the lock of a start that failed, and remove the file if that start
        made it (a refused start left a stray ``.lock`` behind). Removed while held: a
        start that opens it meanwhile finds it replaced (see ``lock_database_file``)."""
        if self.created:
            self.path.unlink(missing_ok=True)
        self.handle.close()


def _unwritable(path: Path, exc: OSError, shown: str) -> ConfigError:
    return ConfigError(
        f"database URL {shown!r}: cannot create {path} ({exc.strerror}): the control plane "
        f"writes beside its SQLite file (its .lock file, SQLite's journal); make "
        f"{path.parent} writable, or give a SQLite file in a writable directory"
    )


def lock_database_file(url: str) -> DatabaseFileLock | None:
    """For a SQLite URL, hold an OS lock on ``<database file>.lock`` (``flock``, released
    when the file is closed or the process ends); another holder means another control
    plane serves that file: ``ConfigError``, as is a directory this user cannot write.
    ``None`` for other databases (several replicas may share PostgreSQL). Keep the
    returned lock open while serving."""
    import fcntl

    parsed = _parse_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    shown = display_url(url)
    db_file = Path(parsed.database).resolve()
    make_database_dir(db_file, shown)
    lock_path = db_file.with_name(db_file.name + ".lock")
    while True:
        created = not lock_path.exists()
        try:
            handle = open(lock_path, "a+")  # noqa: SIM115 - held for the process's life
        except OSError as exc:
            raise _unwritable(lock_path, exc, shown) from exc
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise ConfigError(
                f"another control plane{who} already serves the SQLite database {db_file} "
                f"(it holds {lock_path}): one replica per database file; use PostgreSQL "
                "for several replicas"
            ) from exc
        if _is_open_file(lock_path, handle):
            break
        handle.close()  # removed by a failed start after we opened it: lock the new one
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return DatabaseFileLock(lock_path, handle, created)


def _is_open_file(path: Path, handle: IO[str]) -> bool:
    """Whether ``path`` still names the file ``handle`` has open."""
    try:
        named = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(handle.fileno())
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def check_integrity(engine: Engine, shown: str) -> None:
    """Refuse a damaged SQLite file at start: ``PRAGMA quick_check`` (reads every page
    once, milliseconds for a control plane's database). A damaged file used to start,
    answer ``/healthz`` with 200 and every other request with a 500."""
    if engine.dialect.name != "sqlite":
        return
    with engine.connect() as conn:
        problems = [str(row[0]) for row in conn.exec_driver_sql("PRAGMA quick_check(3)")]
    if problems != ["ok"]:
        raise _damaged(shown, "PRAGMA quick_check: " + "; ".join(problems))


def _damaged(shown: str, problem: str) -> ConfigError:
    return ConfigError(
        f"the SQLite database {shown!r} is damaged ({' '.join(problem.split())}): restore "
        "it from a backup, or move it away to start with an empty registry"
    )


class Store:
    """All reads and writes of the control plane's state."""

    def __init__(self, url: str, answer_timeout_s: float | None = DEFAULT_ANSWER_TIMEOUT_S) -> None:
        """``answer_timeout_s``: how long a PostgreSQL round trip may wait for its answer
        (then: 503 ``database unavailable: did not answer in N s``); None: no limit."""
        self.url = normalize_url(url)  # postgres:// -> the installed driver
        self.availability = DatabaseAvailability(display_url(self.url))
        self.engine, bounded = _engine(self.url, answer_timeout_s)
        if bounded is not None:
            bounded.limit_s = None  # migrations may wait for another replica's
        try:
            check_integrity(self.engine, display_url(url))
            migrate(self.engine)
        except sa.exc.DatabaseError as exc:  # unreachable, refused, not a database
            self.engine.dispose()
            if _is_corrupt(exc.orig):  # not "file is not a database": maybe another file
                raise _damaged(display_url(url), str(exc.orig)) from exc
            reason = " ".join(str(exc.orig).split())  # drivers' messages span lines
            raise ConfigError(f"cannot open the database {display_url(url)!r}: {reason}") from exc
        if bounded is not None:
            bounded.limit_s = answer_timeout_s
        _watch_availability(self.engine, self.availability)  # outages from now on

    def close(self) -> None:
        self.engine.dispose()

    def schema_version(self) -> int:
        """The database's schema version. Raises the damage of a damaged SQLite file
        (once seen) even where this read succeeds: ``/healthz`` answers 503 for it."""
        damaged = self.availability.damage
        if damaged is not None:
            raise sa.exc.DatabaseError(None, None, damaged)
        return current_version(self.engine)

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(sa.select(1))

    # ------------------------------------------------------------------ clusters
    def add_cluster(self, record: ClusterRecord, audit: AuditEntry) -> None:
        conflict = Conflict(f"cluster {record.name!r} is already registered")
        with _unique(conflict), self.engine.begin() as conn:
            if _exists(conn, clusters.c.name, record.name):
                raise conflict
            conn.execute(
                clusters.insert().values(
                    name=record.name,
                    bootstrap=record.bootstrap,
                    tags=dict(record.tags),
                    created_at=record.created_at,
                    updated_at=record.updated_at,
                    kafka_cluster_id=record.kafka_cluster_id,
                )
            )
            _audit(conn, audit)

    def get_cluster(self, name: str) -> ClusterRecord:
        with self.engine.connect() as conn:
            row = conn.execute(clusters.select().where(clusters.c.name == name)).first()
            if row is None:
                raise NotFound(f"unknown cluster {name!r} (known: {_known_clusters(conn)})")
        return _cluster(row)

    def list_clusters(self) -> list[ClusterRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(clusters.select().order_by(bytewise(clusters.c.name))).all()
        return [_cluster(r) for r in rows]

    def update_cluster(
        self,
        name: str,
        audit: AuditEntry,
        bootstrap: str | None = None,
        tags: Mapping[str, str] | None = None,
        kafka_cluster_id: str | None = None,
    ) -> ClusterRecord:
        """Change a cluster's bootstrap and/or tags. A bootstrap comes with the Kafka
        cluster id it answered with (``kafka_cluster_id``, None when not known), which
        replaces the recorded one; without a bootstrap, the recorded id is kept."""
        values: dict[str, Any] = {"updated_at": utcnow()}
        if bootstrap is not None:
            values["bootstrap"] = bootstrap
            values["kafka_cluster_id"] = kafka_cluster_id
        if tags is not None:
            values["tags"] = dict(tags)
        with self.engine.begin() as conn:
            done = conn.execute(clusters.update().where(clusters.c.name == name).values(**values))
            if done.rowcount == 0:
                raise NotFound(f"unknown cluster {name!r} (known: {_known_clusters(conn)})")
            _audit(conn, audit)
            row = conn.execute(clusters.select().where(clusters.c.name == name)).one()
        return _cluster(row)

    def record_kafka_cluster_id(self, name: str, bootstrap: str, kafka_cluster_id: str) -> bool:
        """Record the Kafka cluster id of cluster ``name`` if none is recorded yet and it
        is still registered at ``bootstrap`` (where the id was asked). Whether it was."""
        with self.engine.begin() as conn:
            done = conn.execute(
                clusters.update()
                .where(
                    clusters.c.name == name,
                    clusters.c.bootstrap == bootstrap,
                    clusters.c.kafka_cluster_id.is_(None),
                )
                .values(kafka_cluster_id=kafka_cluster_id)
            )
        return done.rowcount > 0

    def delete_cluster(self, name: str, audit: AuditEntry) -> None:
        with self.engine.begin() as conn:
            held = self._segments_on_cluster(conn, name)
            if held:
                raise Conflict(_cluster_in_use(name, held))
            done = conn.execute(clusters.delete().where(clusters.c.name == name))
            if done.rowcount == 0:
                raise NotFound(f"unknown cluster {name!r} (known: {_known_clusters(conn)})")
            _audit(conn, audit)

    @staticmethod
    def _segments_on_cluster(conn: Connection, cluster: str) -> dict[str, list[str]]:
        """Each stream with a segment on ``cluster`` not retired yet: its lanes there, as
        ``lane (state)``; streams and lanes in code point order, as bytewise()."""
        rows = conn.execute(
            sa.select(segments.c.stream, segments.c.lane, segments.c.state).where(
                segments.c.cluster == cluster, segments.c.state != SegmentState.RETIRED.value
            )
        )
        held: dict[str, set[str]] = {}
        for r in rows:
            held.setdefault(r.stream, set()).add(f"{r.lane} ({r.state})")
        return {stream: sorted(held[stream]) for stream in sorted(held)}

    def streams_with_segments_on(self, cluster: str) -> list[str]:
        """The streams with a segment on ``cluster``, in any state (retired included: its
        topic is still watched, then fenced), in code point order."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(segments.c.stream).where(segments.c.cluster == cluster).distinct()
            )
            return sorted(r.stream for r in rows)

    # ------------------------------------------------------------------ streams
    def add_stream(self, record: StreamRecord, table: RoutingTable, audit: AuditEntry) -> None:
        conflict = Conflict(f"stream {record.name!r} already exists")
        with _unique(conflict), self.engine.begin() as conn:
            if _exists(conn, streams.c.name, record.name):
                raise conflict
            conn.execute(
                streams.insert().values(
                    name=record.name,
                    lanes=list(record.lanes),
                    partitions=record.partitions,
                    dlq_partitions=record.dlq_partitions,
                    replication_factor=record.replication_factor,
                    config=dict(record.config),
                    max_record_bytes=record.max_record_bytes,
                    epoch=table.epoch,
                    created_at=record.created_at,
                )
            )
            _insert_segments(conn, table)
            _audit(conn, audit)

    def get_stream(self, name: str) -> StreamRecord:
        with self.engine.connect() as conn:
            return _stream(self._stream_row(conn, name))

    def list_streams(self) -> list[StreamRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(streams.select().order_by(bytewise(streams.c.name))).all()
        return [_stream(r) for r in rows]

    def stream_with_routing(self, name: str) -> tuple[StreamRecord, RoutingTable]:
        with self.engine.connect() as conn:
            row = self._stream_row(conn, name)
            return _stream(row), _routing(conn, row)

    def routing(self, name: str) -> RoutingTable:
        with self.engine.connect() as conn:
            return _routing(conn, self._stream_row(conn, name))

    def active_clusters(self) -> dict[str, list[str]]:
        """Per stream, the clusters of its active segments (sorted)."""
        out: dict[str, set[str]] = {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(segments.c.stream, segments.c.cluster).where(
                    segments.c.state == SegmentState.ACTIVE.value
                )
            )
            for r in rows:
                out.setdefault(r.stream, set()).add(r.cluster)
        return {k: sorted(v) for k, v in out.items()}

    def stream_epochs(self, names: Collection[str]) -> dict[str, int]:
        """Current epochs of the named streams; a deleted stream is absent."""
        if not names:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(streams.c.name, streams.c.epoch).where(streams.c.name.in_(list(names)))
            )
            return {r.name: int(r.epoch) for r in rows}

    def save_routing(self, table: RoutingTable, expected_epoch: int, audit: AuditEntry) -> None:
        """Replace a stream's segments and lanes (a lane added: ``add_lane``) if its epoch
        is still ``expected_epoch``."""
        if table.epoch <= expected_epoch:
            raise ValueError("a routing change must increase the epoch")
        with self.engine.begin() as conn:
            done = conn.execute(
                streams.update()
                .where(streams.c.name == table.stream, streams.c.epoch == expected_epoch)
                .values(epoch=table.epoch, lanes=list(table.lanes))
            )
            if done.rowcount == 0:
                row = self._stream_row(conn, table.stream)  # NotFound if deleted meanwhile
                raise Conflict(
                    f"stream {table.stream!r} moved on to epoch {row.epoch} while this change "
                    f"was prepared from epoch {expected_epoch}: retry"
                )
            conn.execute(segments.delete().where(segments.c.stream == table.stream))
            _insert_segments(conn, table)
            _audit(conn, audit)

    def delete_stream(self, name: str, audit: AuditEntry) -> None:
        with self.engine.begin() as conn:
            epoch = self._stream_row(conn, name).epoch
            conn.execute(segments.delete().where(segments.c.stream == name))
            conn.execute(streams.delete().where(streams.c.name == name))
            gone = deleted_stream_epochs.c.name == name
            conn.execute(deleted_stream_epochs.delete().where(gone))
            conn.execute(deleted_stream_epochs.insert().values(name=name, epoch=epoch))
            _audit(conn, audit)

    def first_epoch(self, name: str) -> int:
        """The epoch a new stream called ``name`` starts at: 1, or one past the last
        epoch of a deleted stream of that name."""
        with self.engine.connect() as conn:
            last = conn.execute(
                sa.select(deleted_stream_epochs.c.epoch).where(deleted_stream_epochs.c.name == name)
            ).scalar()
        return 1 if last is None else int(last) + 1

    @staticmethod
    def _stream_row(conn: Connection, name: str) -> sa.Row[Any]:
        row = conn.execute(streams.select().where(streams.c.name == name)).first()
        if row is None:
            raise NotFound(f"unknown stream {name!r}")
        return row

    # ------------------------------------------------------------------ audit
    def append_audit(self, entry: AuditEntry) -> None:
        with self.engine.begin() as conn:
            _audit(conn, entry)

    def audit(self, stream: str | None = None, limit: int = 100) -> list[AuditEntry]:
        """The newest entries first."""
        query = audit_log.select().order_by(audit_log.c.id.desc()).limit(limit)
        if stream is not None:
            query = query.where(audit_log.c.stream == stream)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            AuditEntry(
                id=r.id,
                time=_aware(r.time),
                actor=r.actor,
                action=r.action,
                stream=r.stream,
                detail=dict(r.detail),
            )
            for r in rows
        ]


# ---------------------------------------------------------------------- row mapping
@contextmanager
def _unique(conflict: Conflict) -> Iterator[None]:
    """A concurrent insert of the same key (another replica) is the same conflict."""
    try:
        yield
    except sa.exc.IntegrityError as exc:
        raise conflict from exc


def _exists(conn: Connection, column: sa.Column[Any], value: str) -> bool:
    return conn.execute(sa.select(column).where(column == value)).first() is not None


def _cluster_in_use(cluster: str, held: Mapping[str, list[str]]) -> str:
    """Why ``cluster`` cannot be removed yet, and how to move what it holds off it."""
    streams = "; ".join(f"{stream}: {', '.join(lanes)}" for stream, lanes in held.items())
    return (
        f"cluster {cluster!r} still holds segments ({streams}). Move them off it first: "
        "`streamplane streams failover STREAM --to CLUSTER` moves every lane but the dlq, "
        "`--lane dlq` moves the dlq lane; a draining segment retires once its groups have "
        "read it, a dlq segment holding dead letters once they are replayed "
        "(`streamplane dlq replay STREAM`). Or delete the streams"
    )


def _known_clusters(conn: Connection) -> str:
    names = list(
        conn.execute(sa.select(clusters.c.name).order_by(bytewise(clusters.c.name))).scalars()
    )
    return ", ".join(names) or "none"


def _audit(conn: Connection, entry: AuditEntry) -> None:
    conn.execute(
        audit_log.insert().values(
            time=entry.time,
            actor=entry.actor,
            action=entry.action,
            stream=entry.stream,
            detail=dict(entry.detail),
        )
    )


def _insert_segments(conn: Connection, table: RoutingTable) -> None:
    rows = [
        {
            "stream": table.stream,
            "cluster": s.cluster,
            "topic": s.topic,
            "position": i,
            "lane": s.lane,
            "partitions": s.partitions,
            "state": s.state.value,
            "epoch": s.epoch,
            "sealed_end_offsets": {str(p): o for p, o in s.sealed_end_offsets.items()},
        }
        for i, s in enumerate(table.segments)
    ]
    if rows:
        conn.execute(segments.insert(), rows)


def _cluster(row: sa.Row[Any]) -> ClusterRecord:
    return ClusterRecord(
        name=row.name,
        bootstrap=row.bootstrap,
        tags=dict(row.tags),
        created_at=_aware(row.created_at),
        updated_at=_aware(row.updated_at),
        kafka_cluster_id=row.kafka_cluster_id,
    )


def _stream(row: sa.Row[Any]) -> StreamRecord:
    return StreamRecord(
        name=row.name,
        lanes=tuple(row.lanes),
        partitions=row.partitions,
        dlq_partitions=row.dlq_partitions,
        replication_factor=row.replication_factor,
        config=dict(row.config),
        max_record_bytes=int(row.max_record_bytes),
        epoch=int(row.epoch),
        created_at=_aware(row.created_at),
    )


def _routing(conn: Connection, stream_row: sa.Row[Any]) -> RoutingTable:
    rows: Iterable[sa.Row[Any]] = conn.execute(
        segments.select().where(segments.c.stream == stream_row.name).order_by(segments.c.position)
    )
    return RoutingTable(
        stream=stream_row.name,
        epoch=int(stream_row.epoch),
        lanes=tuple(stream_row.lanes),
        segments=tuple(
            Segment(
                lane=r.lane,
                cluster=r.cluster,
                topic=r.topic,
                partitions=r.partitions,
                state=SegmentState(r.state),
                epoch=int(r.epoch),
                sealed_end_offsets={int(p): int(o) for p, o in dict(r.sealed_end_offsets).items()},
            )
            for r in rows
        ),
    )
