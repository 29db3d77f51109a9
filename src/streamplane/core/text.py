"""Wording shared by messages of every layer."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """``1 record``, ``2 records``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
