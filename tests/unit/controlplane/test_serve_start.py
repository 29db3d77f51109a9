"""`control-plane serve` at start: bad database URLs are one `error:` line, postgres://
means the installed driver, a second control plane on one SQLite file is refused, and
the leader says so in the log."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamplane.exceptions import ConfigError, LocalFleetError
from streamplane.local.control_plane_process import ControlPlaneProcess


def serve(cwd: Path, db_url: str, port: int = 0) -> subprocess.CompletedProcess[str]:
    """``control-plane serve`` run in ``cwd`` until it exits (these starts fail)."""
    args = [
        sys.executable, "-m", "streamplane.cli", "control-plane", "serve", "--db", db_url,
        "--port", str(port), "--token", "serve-test-token", "--no-import-local", "--no-health",
    ]  # fmt: skip
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: "), lines
    return lines[0]


def test_a_port_that_is_not_a_number_is_one_error_line(tmp_path: Path) -> None:
    line = one_error_line(serve(tmp_path, "postgresql+psycopg://u:secret@127.0.0.1:notaport/db"))
    assert "the port is not a number" in line
    assert "secret" not in line


def test_a_sqlite_file_in_a_missing_directory_tree_is_refused(tmp_path: Path) -> None:
    """A mistyped --db made its directories and served a new, empty registry; only the
    file's own directory is made (``.streamplane/`` on a fresh checkout)."""
    line = one_error_line(serve(tmp_path, f"sqlite:///{tmp_path}/no/such/dir/cp.db"))
    assert f"directory {tmp_path}/no/such does not exist" in line
    assert not (tmp_path / "no").exists()


def test_postgres_urls_mean_the_installed_driver(tmp_path: Path) -> None:
    # Nothing listens on port 1: the database cannot be opened, but the driver loads.
    for scheme in ("postgres", "postgresql"):
        line = one_error_line(serve(tmp_path, f"{scheme}://u@127.0.0.1:1/db"))
        assert "driver not installed" not in line, line
        assert "cannot open the database" in line, line


def test_normalize_url() -> None:
    from streamplane.controlplane.store import normalize_url

    assert normalize_url("postgres://u:p@h:5432/d") == "postgresql+psycopg://u:p@h:5432/d"
    assert normalize_url("postgresql://u@h/d") == "postgresql+psycopg://u@h/d"
    assert normalize_url("postgresql+psycopg://u@h/d") == "postgresql+psycopg://u@h/d"
    assert normalize_url("sqlite:///x.db") == "sqlite:///x.db"
    with pytest.raises(ConfigError, match="the port is not a number"):
        normalize_url("postgresql+psycopg://u@h:x/d")


def test_the_leader_says_so_in_the_log(tmp_path: Path) -> None:
    cp = ControlPlaneProcess(tmp_path / "cp", log_level="info", extra_args=("--no-health",))
    try:
        cp.start()
        log = cp.log_file.read_text()
    finally:
        cp.stop()
    leader_lines = [line for line in log.splitlines() if "this replica is the leader" in line]
    assert len(leader_lines) == 1, log
    # Every logged line (uvicorn's and the control plane's) starts with its time.
    logged = [line for line in log.splitlines() if re.search(r"\b(INFO|WARNING|ERROR):", line)]
    assert any("Application startup complete" in line for line in logged), log
    assert any("this replica is the leader" in line for line in logged), log
    stamped = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (INFO|WARNING|ERROR): ")
    assert all(stamped.match(line) for line in logged), logged


def test_a_second_control_plane_on_one_sqlite_file_is_refused(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'shared' / 'cp.db'}"
    first = ControlPlaneProcess(tmp_path / "first", db_url=db_url, extra_args=("--no-health",))
    second = ControlPlaneProcess(tmp_path / "second", db_url=db_url, extra_args=("--no-health",))
    try:
        first.start()
        with pytest.raises(LocalFleetError, match="another control plane"):
            second.start()
        refused = second.log_file.read_text()
        assert "Traceback" not in refused, refused
        errors = [line for line in refused.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, refused
        assert f"(pid {first.pid})" in errors[0]
        assert "one replica per database file" in errors[0]
    finally:
        second.stop()
        first.stop()


def test_the_lock_is_an_os_lock_on_a_file_beside_the_database(tmp_path: Path) -> None:
    from streamplane.controlplane.store import lock_database_file

    url = f"sqlite:///{tmp_path / 'cp.db'}"
    held = lock_database_file(url)
    assert held is not None
    try:
        assert (tmp_path / "cp.db.lock").is_file()
        with pytest.raises(ConfigError, match="one replica per database file"):
            lock_database_file(url)
    finally:
        held.close()
    again = lock_database_file(url)
    assert again is not None
    again.close()
    assert lock_database_file("postgresql+psycopg://u@h/d") is None
