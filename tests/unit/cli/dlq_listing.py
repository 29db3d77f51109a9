"""``dlq list`` over a fixed listing, without Kafka or a control plane."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pytest
from click.testing import CliRunner

import streamplane.cli.dlq as cli_dlq
from streamplane.client.dlq import DeadLetter, DlqListing


def dlq_list_of(
    monkeypatch: pytest.MonkeyPatch, letters: Sequence[DeadLetter]
) -> Callable[..., str]:
    """``run(*args)``: the output of ``dlq list s *args`` listing ``letters``."""

    @contextmanager
    def connect(url: str, token: str | None) -> Iterator[object]:
        yield object()

    monkeypatch.setattr(cli_dlq, "connect", connect)
    monkeypatch.setattr(
        cli_dlq, "list_dead_letters", lambda client, stream, limit: DlqListing(list(letters), [])
    )

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli_dlq.dlq, ["list", "s", *args])
        assert result.exit_code == 0, result.output
        return result.output

    return run
