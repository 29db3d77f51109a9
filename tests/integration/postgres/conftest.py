"""A real PostgreSQL server for the production-store tests, started by the tests.

``infra/postgres/ensure.sh`` installs PostgreSQL from Debian's packages if it is missing,
then initialises a cluster in a fresh directory and starts it on a free loopback port
(as the ``postgres`` user when run as root). ``pg_url`` gives each test its own database;
``replica_pair(*extra_args)`` two control-plane replicas over it (not started).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from streamplane.local.control_plane_process import ControlPlaneProcess, free_port

ENSURE = Path(__file__).resolve().parents[3] / "infra" / "postgres" / "ensure.sh"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of the server's ``streamplane`` database."""
    # Not under pytest's tmp dirs: those are private to root, and the server runs as
    # another user.
    pg_dir = Path(tempfile.mkdtemp(prefix="streamplane-pg-"))
    done = subprocess.run(
        ["bash", str(ENSURE), "start", str(pg_dir), str(free_port())],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"PostgreSQL did not start: {done.stderr.strip()[-2000:]}")
    url = done.stdout.strip().splitlines()[-1]
    try:
        yield url
    finally:
        subprocess.run(["bash", str(ENSURE), "stop", str(pg_dir)], timeout=120, check=False)
        shutil.rmtree(pg_dir, ignore_errors=True)


@pytest.fixture
def pg_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database for one test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.engine.make_url(postgres_server)
    conninfo = f"host={admin.host} port={admin.port} user={admin.username} dbname=postgres"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield admin.set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def replica_pair(tmp_path: Path, pg_url: str) -> Iterator[Callable[..., list[ControlPlaneProcess]]]:
    """``replica_pair(*extra_args)``: two control-plane replicas over ``pg_url`` with one
    API token and ``serve``'s ``extra_args``, not started; stopped after the test."""
    procs: list[ControlPlaneProcess] = []

    def make(*extra_args: str) -> list[ControlPlaneProcess]:
        token = f"tok-{uuid.uuid4().hex}"
        procs.extend(
            ControlPlaneProcess(
                tmp_path / f"replica-{i}",
                token=token,
                db_url=pg_url,
                extra_args=extra_args,
                log_level="info",
            )
            for i in range(2)
        )
        return procs

    try:
        yield make
    finally:
        for p in procs:
            p.stop()
