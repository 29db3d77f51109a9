"""`streamplane generate` and `streamplane pipeline ...`: help, and one clear line on bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_bad_telemetry_options_are_one_line_before_spark_starts(tmp_path: Path) -> None:
    """A warehouse under a file, a zero trigger size, an unreachable control plane: one
    line, before the Spark JVM (a 175-line Java trace, a silent 'no limit', 20 s)."""
    afile = tmp_path / "afile"
    afile.write_text("hi")
    base = ["pipeline", "telemetry", "--stream", "s", "--url", "http://127.0.0.1:9"]
    for args, needle in (
        (["--warehouse", str(afile / "wh")], f"{afile} is not a directory"),
        (["--checkpoint", str(afile)], f"{afile} is not a directory"),
        (["--max-records-per-trigger", "0"], "--max-records-per-trigger"),
        (["--warehouse", str(tmp_path / "wh")], "unreachable"),
    ):
        proc = run_cli(*base, *args)
        assert proc.returncode != 0
        assert needle in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert len([x for x in proc.stderr.splitlines() if x.strip()]) <= 3, proc.stderr
    assert not (tmp_path / "wh").exists()


def test_an_unwritable_summary_fails_before_anything_is_sent(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("hi")
    proc = run_cli(
        "generate", "--stream", "s", "--url", "http://127.0.0.1:9", "--summary",
        str(afile / "x.json"),
    )  # fmt: skip
    assert proc.returncode == 1
    assert "cannot write the summary" in proc.stderr and "unreachable" not in proc.stderr
