"""Waiting in tests for something that happens in the background."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.05) -> T:
    """Call ``probe`` every ``every`` seconds until it returns a truthy value; that value.

    ``what`` says what is waited for: an ``AssertionError`` names it when ``timeout``
    seconds pass first. The timeout is a hang guard, not a latency bound: a test that
    cares how soon something happens measures that itself (``time.monotonic()`` around
    the call) and asserts on it. The probe runs at least once.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
