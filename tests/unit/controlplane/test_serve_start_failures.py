"""`control-plane serve` that cannot start: a SQLite file in a directory it cannot write
is one `error:` line naming the path and what to do (it was a traceback ending in
``OSError: [Errno 30] Read-only file system: '.../x.db.lock'``), and a refused start
leaves nothing behind (a port in use left a stray ``<db>.lock``)."""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamplane.controlplane import store as store_module
from streamplane.controlplane.store import lock_database_file
from streamplane.exceptions import ConfigError
from tests.unit.controlplane.test_serve_start import one_error_line, serve

# /sys (sysfs) refuses new files to every user, root included: a directory this
# process cannot write, wherever the tests run.
UNWRITABLE_DIR = Path("/sys")


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port of 18900-18999 another socket listens on."""
    for port in range(18900, 19000):
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue
        sock.listen()
        try:
            yield port
        finally:
            sock.close()
        return
    pytest.skip("no free port in 18900-18999")


def test_a_database_in_an_unwritable_directory_is_one_error_line(tmp_path: Path) -> None:
    line = one_error_line(serve(tmp_path, f"sqlite:///{UNWRITABLE_DIR}/cp.db"))
    assert f"cannot create {UNWRITABLE_DIR}/cp.db.lock (Permission denied)" in line
    assert f"make {UNWRITABLE_DIR} writable, or give a SQLite file in a writable directory" in line


def test_a_database_directory_that_cannot_be_made_is_one_error_line(tmp_path: Path) -> None:
    line = one_error_line(serve(tmp_path, f"sqlite:///{UNWRITABLE_DIR}/streamplane/cp.db"))
    assert f"cannot create {UNWRITABLE_DIR}/streamplane (" in line
    assert f"make {UNWRITABLE_DIR} writable" in line


def test_a_read_only_file_system_names_the_lock_file_and_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def read_only(path: Any, *args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(store_module, "open", read_only, raising=False)
    with pytest.raises(ConfigError) as raised:
        lock_database_file(f"sqlite:///{tmp_path}/cp.db")
    message = str(raised.value)
    assert f"cannot create {tmp_path}/cp.db.lock (Read-only file system)" in message
    assert f"make {tmp_path} writable" in message


def test_a_port_in_use_leaves_no_lock_file_nor_database(tmp_path: Path, busy_port: int) -> None:
    db_dir = tmp_path / "state"
    line = one_error_line(serve(tmp_path, f"sqlite:///{db_dir}/cp.db", busy_port))
    assert f"port {busy_port} on 127.0.0.1 is already in use" in line
    assert sorted(p.name for p in db_dir.iterdir()) == []


def test_a_refused_start_keeps_a_lock_file_it_did_not_make(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cp.db"
    first = lock_database_file(url)
    assert first is not None and first.created
    first.close()  # a clean stop: the file stays
    again = lock_database_file(url)
    assert again is not None and not again.created
    again.abandon()
    assert (tmp_path / "cp.db.lock").is_file()  # made by an earlier start: kept


def test_an_abandoned_lock_is_removed_and_can_be_taken_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cp.db"
    lock = lock_database_file(url)
    assert lock is not None
    lock.abandon()
    assert not (tmp_path / "cp.db.lock").exists()
    again = lock_database_file(url)
    assert again is not None
    again.close()


def test_a_lock_file_removed_after_it_was_opened_is_not_the_one_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start that opened the lock file just before a failed start removed it must
    not lock the removed file (two replicas would then serve one database)."""
    url = f"sqlite:///{tmp_path}/cp.db"
    lock_path = tmp_path / "cp.db.lock"
    real_open = open
    opened = 0

    def open_then_removed(path: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal opened
        handle = real_open(path, *args, **kwargs)
        opened += 1
        if opened == 1:
            Path(path).unlink()  # the failed start's abandon(), between open and flock
        return handle

    monkeypatch.setattr(store_module, "open", open_then_removed, raising=False)
    lock = lock_database_file(url)
    assert lock is not None
    try:
        assert opened == 2
        held = lock_path.stat()
        assert os.fstat(lock.handle.fileno()).st_ino == held.st_ino
    finally:
        lock.close()
