"""`ops apply --cancel` asks first: it names what it would cancel (how many
reassignments, of which topics), cancels only after a yes or with `--yes`/`-y`, and
without a terminal to ask on (and no `--yes`) refuses with exit 2 instead of hanging on
the prompt or cancelling. The old command cancelled every reassignment without asking."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from streamplane.cli.main import main
from streamplane.ops.stub import StubOpsAdmin
from tests.unit.ops.test_apply_cli import Run

MOVING = {("orders", 0): (4, 2, 3), ("orders", 1): (2, 4, 1), ("payments", 0): (3, 4)}


class _Stdin(io.StringIO):
    def __init__(self, text: str, tty: bool) -> None:
        super().__init__(text)
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.fixture
def moving(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> StubOpsAdmin:
    """Three reassignments in progress, of topics orders and payments, that never end."""
    admin = StubOpsAdmin.cluster(
        {1: "a", 2: "b", 3: "c", 4: "a"},
        {("orders", 0): (1, 2, 3), ("orders", 1): (2, 3, 1), ("payments", 0): (3, 1)},
        reassignment_steps=10**6,
    )
    admin.alter_reassignments(MOVING)
    admin.calls.clear()
    monkeypatch.setattr("streamplane.cli.ops.KafkaOpsAdmin", lambda _bootstrap: admin)
    monkeypatch.chdir(tmp_path)  # the default state file goes under the current directory
    return admin


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    def invoke(*args: str, stdin: str = "", tty: bool = False) -> Run:
        monkeypatch.setattr(sys, "argv", ["streamplane", *args])
        monkeypatch.setattr(sys, "stdin", _Stdin(stdin, tty))
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return invoke


CANCEL = ("ops", "apply", "--cancel", "--bootstrap", "stub:9092")


def _cancel_requests(admin: StubOpsAdmin) -> list[object]:
    return [
        targets
        for call, targets in admin.calls
        if call == "alter_reassignments" and None in targets.values()
    ]


def test_without_a_terminal_and_without_yes_nothing_is_cancelled_and_the_exit_is_2(
    moving: StubOpsAdmin, run: Callable[..., Run]
) -> None:
    result = run(*CANCEL, stdin="y\n", tty=False)  # piped input is no confirmation
    assert result.code == 2, result.err
    error = " ".join(result.err.split())
    assert error.startswith("error: refusing to cancel 3 reassignment(s) in progress"), error
    assert "topic(s) orders, payments" in error and "orders-0, orders-1, payments-0" in error
    assert "stdin is not a terminal" in error and "--yes" in error
    assert sorted(moving.running) == sorted(MOVING)
    assert _cancel_requests(moving) == []


@pytest.mark.parametrize("answer", ["n\n", ""])
def test_answering_no_at_the_prompt_cancels_nothing(
    answer: str, moving: StubOpsAdmin, run: Callable[..., Run]
) -> None:
    result = run(*CANCEL, stdin=answer, tty=True)
    assert result.code == 1, result.err
    prompt = " ".join(result.err.split())
    assert "cancel 3 reassignment(s) in progress on stub:9092" in prompt, prompt
    assert "topic(s) orders, payments" in prompt and "[y/N]" in prompt
    assert "nothing cancelled" in prompt
    assert sorted(moving.running) == sorted(MOVING)
    assert _cancel_requests(moving) == []


def test_answering_yes_at_the_prompt_cancels_what_it_named(
    moving: StubOpsAdmin, run: Callable[..., Run]
) -> None:
    result = run(*CANCEL, stdin="y\n", tty=True)
    assert result.code == 0, result.err
    assert "topic(s) orders, payments" in result.err
    assert "cancelled 3 reassignment(s)" in result.out
    assert moving.running == {}
    assert moving.replicas[("orders", 0)] == (1, 2, 3)


@pytest.mark.parametrize("flag", ["--yes", "-y"])
def test_yes_cancels_without_asking_even_without_a_terminal(
    flag: str, moving: StubOpsAdmin, run: Callable[..., Run]
) -> None:
    result = run(*CANCEL, flag, tty=False)
    assert result.code == 0, result.err
    assert "[y/N]" not in result.err
    assert "cancelled 3 reassignment(s)" in result.out
    assert moving.running == {}


def test_nothing_running_needs_no_confirmation(
    moving: StubOpsAdmin, run: Callable[..., Run]
) -> None:
    moving.running.clear()
    result = run(*CANCEL, tty=False)
    assert result.code == 0, result.err
    assert "no reassignment in progress: nothing to cancel" in result.out
