"""A damaged SQLite file (pages overwritten): refused at start with one line (``PRAGMA
quick_check``); met while serving, a 503 ``the store cannot be read: ...`` (it was a
500 ``internal error (DatabaseError)``), ``/healthz`` a 503 too (it was 200 ok), and one
error in the log (the health loop and the sealer warned every second)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from streamplane.controlplane.service import ControlPlaneService
from streamplane.controlplane.store import Store
from streamplane.exceptions import ConfigError

if TYPE_CHECKING:
    from starlette.testclient import TestClient


def overwrite_table_root(db_file: Path, table: str) -> None:
    """Overwrite the root page of ``table`` with 0xFF bytes (no valid page type)."""
    conn = sqlite3.connect(db_file)
    query = "SELECT rootpage FROM sqlite_master WHERE name = ?"
    (root,) = conn.execute(query, (table,)).fetchone()
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with open(db_file, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)


def test_a_damaged_file_is_refused_at_start(tmp_path: Path) -> None:
    db_file = tmp_path / "cp.db"
    Store(f"sqlite:///{db_file}").close()
    overwrite_table_root(db_file, "clusters")
    with pytest.raises(ConfigError) as raised:
        Store(f"sqlite:///{db_file}")
    message = str(raised.value)
    assert f"the SQLite database 'sqlite:///{db_file}' is damaged (" in message
    assert message.endswith(
        "restore it from a backup, or move it away to start with an empty registry"
    )
    assert "\n" not in message


def test_a_sound_file_opens(tmp_path: Path) -> None:
    db_file = tmp_path / "cp.db"
    Store(f"sqlite:///{db_file}").close()
    Store(f"sqlite:///{db_file}").close()  # checked again, and sound


def test_damage_met_while_serving_is_a_503_and_one_error_in_the_log(
    http: TestClient,
    service: ControlPlaneService,
    db_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert http.get("/healthz").status_code == 200
    overwrite_table_root(Path(db_url.removeprefix("sqlite:///")), "clusters")
    service.store.engine.dispose()  # the pooled connections cached the sound pages
    with caplog.at_level(logging.WARNING, logger="streamplane"):
        for _ in range(2):
            resp = http.get("/v1/clusters")
            assert resp.status_code == 503, resp.text
            assert resp.json() == {
                "detail": "database unavailable: the store cannot be read: database disk "
                "image is malformed (restore it from a backup)"
            }
        assert http.get("/v1/streams").status_code == 200  # another table: still read
        health = http.get("/healthz")
        assert health.status_code == 503
        assert "database disk image is malformed" in health.json()["detail"]
    store_lines = [r.getMessage() for r in caplog.records if r.name.endswith(".store")]
    assert len(store_lines) == 1, store_lines  # no "answers again" after /v1/streams
    assert (
        "is damaged: database disk image is malformed; restore it from a backup" in (store_lines[0])
    )
    assert service.store.availability.damage is not None
