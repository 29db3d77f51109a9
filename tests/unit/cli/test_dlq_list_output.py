"""`streamplane dlq list`'s output: the JSON gives back every key's and value's exact
bytes, and the table keeps one line per record.

An exploratory run (/tmp/explore-client/t30_binary_dlq.py) found b"\\x00\\xff\\xfe" listed
as "\\u0000\\ufffd\\ufffd", an empty key or value as null, and an error reason with a
newline breaking the table's rows."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from click.testing import CliRunner

import streamplane.cli.dlq as cli_dlq
from streamplane.client.dlq import DeadLetter, DlqListing
from tests.unit.cli.dlq_listing import dlq_list_of

TOPIC = "sp.s.dlq.e1"


def letter(offset: int, key: bytes | None, value: bytes | None, error: str = "bad") -> DeadLetter:
    provenance = {
        "lane": "realtime",
        "topic": "sp.s.realtime.e1",
        "partition": "0",
        "offset": str(offset),
        "attempts": "1",
        "error": error,
    }
    return DeadLetter("local-a", TOPIC, 0, offset, key, value, provenance)


LETTERS = [
    letter(0, b"\xff\x00", b"\x00\xff\xfe binary"),
    letter(1, "ключ".encode(), "unicode ✓ text".encode()),
    letter(2, b"tombstone", None),
    letter(3, b"", b""),
    letter(4, None, b"\x00\x01 text with NULs is UTF-8"),
    letter(5, None, b"x", error="bad\nnewline ☃ \r\tand a tab"),
]


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``listed(*args)``: the output of ``dlq list s *args`` over LETTERS."""
    return dlq_list_of(monkeypatch, LETTERS)


def original(field: str, record: dict[str, Any]) -> bytes | None:
    """A key's or value's bytes, back from ``dlq list --json``."""
    if f"{field}_base64" in record:
        assert field not in record
        return base64.b64decode(record[f"{field}_base64"], validate=True)
    text = record[field]
    return None if text is None else text.encode()


def test_json_gives_back_the_exact_bytes(listed: Any) -> None:
    records = json.loads(listed("--json"))
    assert [(original("key", r), original("value", r)) for r in records] == [
        (d.key, d.value) for d in LETTERS
    ]


def test_json_keeps_text_as_text_empty_as_empty_and_null_for_absent(listed: Any) -> None:
    records = json.loads(listed("--json"))
    assert records[0]["key_base64"] == base64.b64encode(b"\xff\x00").decode()
    assert records[0]["value_base64"] == base64.b64encode(b"\x00\xff\xfe binary").decode()
    assert (records[1]["key"], records[1]["value"]) == ("ключ", "unicode ✓ text")
    assert (records[2]["key"], records[2]["value"]) == ("tombstone", None)
    assert (records[3]["key"], records[3]["value"]) == ("", "")
    assert (records[4]["key"], records[4]["value"]) == (None, "\x00\x01 text with NULs is UTF-8")
    assert records[5]["provenance"]["error"] == "bad\nnewline ☃ \r\tand a tab"
    assert records[5]["provenance"]["offset"] == 5


def test_the_table_has_one_line_per_record(listed: Any) -> None:
    lines = listed().splitlines()
    assert len(lines) == 2 + len(LETTERS) + 1  # header, rule, records, "6 records"
    assert lines[-1] == "6 records"
    assert lines[2 + 5].endswith("bad\\nnewline ☃ \\r\\tand a tab")
    assert lines[2 + 5].startswith(f"{TOPIC}[0]@5 ")


def test_a_letter_without_provenance_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record written to the dlq lane directly (no provenance headers) was listed as
    `?  ?[?]@?  ?` (an exploratory run)."""

    @contextmanager
    def connect(url: str, token: str | None) -> Iterator[object]:
        yield object()

    bare = DeadLetter("local-a", TOPIC, 0, 7, None, b"x", {})
    monkeypatch.setattr(cli_dlq, "connect", connect)
    monkeypatch.setattr(
        cli_dlq, "list_dead_letters", lambda client, stream, limit: DlqListing([bare], [])
    )
    result = CliRunner().invoke(cli_dlq.dlq, ["list", "s"])
    assert result.exit_code == 0, result.output
    row = result.output.splitlines()[2]
    assert "(no provenance: written to the dlq lane directly)" in row and "?" not in row


def test_a_letter_of_a_retired_segment_is_marked_and_each_names_its_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dlq segment a failover left behind on local-b, since retired: `dlq replay`
    does not send its letters, which the listing says."""
    old = replace(letter(0, None, b"x"), cluster="local-b", retired=True)
    listed = dlq_list_of(monkeypatch, [old, letter(1, None, b"y")])
    records = json.loads(listed("--json"))
    assert [(r["cluster"], r["topic"], r["retired"]) for r in records] == [
        ("local-b", TOPIC, True),
        ("local-a", TOPIC, False),
    ]
    rows = listed().splitlines()
    assert rows[0].split()[:2] == ["dlq", "record"] and rows[0].split()[2] == "cluster"
    assert rows[2].split()[:3] == [f"{TOPIC}[0]@0", "(retired)", "local-b"]
    assert rows[3].split()[:2] == [f"{TOPIC}[0]@1", "local-a"]
