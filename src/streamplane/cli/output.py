"""Terminal output helpers shared by every command."""

from __future__ import annotations

from collections.abc import Sequence

import click


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain left-aligned text table."""
    cells = [[str(h) for h in headers], *[["" if c is None else str(c) for c in r] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def progress(message: str) -> None:
    """A progress line on stderr, so stdout stays parseable."""
    click.echo(f"… {message}", err=True)
