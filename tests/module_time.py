"""A stand-in for the ``time`` module as one module under test sees it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class ModuleTime:
    """``monkeypatch.setattr(module, "time", ModuleTime(sleep=...))``: that module's
    ``time.sleep`` is the one given, everything else the real module's. Patching
    ``time.sleep`` itself changes it for every thread of the process, those of session
    fixtures included (a unit test runs beside them in one pytest process): in a
    two-worker run they used up the lag --watch test's fake sleeps, and it looped for
    good without the KeyboardInterrupt it waited for."""

    def __init__(self, sleep: Callable[[float], None]) -> None:
        self.sleep = sleep

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)
