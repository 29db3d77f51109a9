"""Reading Prometheus exposition text in tests."""

from __future__ import annotations

import re


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The value of the first sample ``name`` with these labels in ``text`` (None: none)."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None
