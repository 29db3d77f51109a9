"""A stand-in for the ``time`` module as one module under test sees it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class ModuleTime:
    """``monkeypatch.setattr(module, "time", ModuleTime(sleep=...))``: that module's
    ``time.sleep`` is the one given, everything else the real module's. Patching
    ``time.sleep`` itself changes it for every thread of the process: the threads of
    session fixtures included (a pytest-xdist worker runs its unit tests beside them),
    which then used up a fake's calls, and the code under test never got its
    KeyboardInterrupt."""

    def __init__(self, sleep: Callable[[float], None]) -> None:
        self.sleep = sleep

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)
