from __future__ import annotations

import pytest

import streamplane.client.consumer as consumer_module
from tests.unit.client.harness import Clock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(consumer_module, "time", c)
    return c
