"""`run` refuses a handler that cannot be called, before anything is read (an
exploratory run: ``run(None)`` and ``run(42)`` returned normally having dead-lettered
the whole stream, "TypeError: 'NoneType' object is not callable" as the last error)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from streamplane.exceptions import ConfigError
from tests.unit.client.harness import DlqBroker, consumer_of


@pytest.mark.parametrize("handler", [None, 42, "handle"])
def test_run_refuses_a_handler_that_is_not_callable(handler: Any) -> None:
    broker = DlqBroker()
    c, state = consumer_of(3, broker)
    stop = threading.Event()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            c.run(handler, stop=stop)
        except ConfigError as exc:
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(5)  # a run that took the handler runs until stopped
    stop.set()
    thread.join(5)
    assert (
        raised
        and f"the handler must be callable (given each StreamMessage), not {handler!r}"
        in str(raised[0])
    )
    c.poll_batch(10, 0)  # housekeeping: what was settled is applied
    assert state.unsettled() == 3 and broker.written == []
