"""``ControlPlaneProcess`` with a relative state directory (``streamplane run`` passes
``.streamplane/local/control-plane``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamplane.local.control_plane_process import ControlPlaneProcess


def test_a_relative_state_dir_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process runs in its state directory: a relative database path was read from
    there, and the control plane silently made a nested copy of the directory tree to
    keep its database in."""
    monkeypatch.chdir(tmp_path)
    cp = ControlPlaneProcess(Path(".streamplane") / "local" / "control-plane")
    want = tmp_path / ".streamplane" / "local" / "control-plane"
    assert cp.state_dir == want and want.is_dir()
    assert cp.db_url == f"sqlite:///{want / 'control-plane.db'}"
