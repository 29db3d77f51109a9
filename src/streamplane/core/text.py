"""Wording shared by messages of every layer."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """``1 record``, ``2 records``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def human_bytes(value: int | None) -> str:
    """``512B``, ``37.9MiB``, ``1.2TiB`` (binary units); ``?`` when unknown."""
    if value is None:
        return "?"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.1f}TiB"
