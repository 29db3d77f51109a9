"""`streamplane generate` and `streamplane pipeline ...`: help, and one clear line on bad input."""

from __future__ import annotations

import subprocess
import sys

CLI = [sys.executable, "-m", "streamplane.cli"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, check=False)


def test_help() -> None:
    for args in (
        ["generate", "--help"],
        ["pipeline", "--help"],
        ["pipeline", "telemetry", "--help"],
    ):
        proc = run_cli(*args)
        assert proc.returncode == 0, proc.stderr
        assert "Usage:" in proc.stdout


def test_bad_generate_options() -> None:
    for args, needle in (
        (["--rate", "0"], "--rate"),
        (["--duration", "-1"], "--duration"),
        (["--poison-ratio", "2"], "--poison-ratio"),
    ):
        proc = run_cli("generate", "--stream", "s", *args)
        assert proc.returncode != 0
        assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_unreachable_control_plane_is_one_line() -> None:
    proc = run_cli("generate", "--stream", "s", "--url", "http://127.0.0.1:9", "--duration", "1")
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "unreachable" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
