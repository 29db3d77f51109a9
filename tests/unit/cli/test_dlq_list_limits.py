"""`dlq list`: what it says past --limit with --json, and of a dlq partition whose topic
is missing (exploratory runs: `--json --limit N` gave no hint that more records
followed, which the table gives; a missing topic was said to be a cluster that does not
answer)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from click.testing import CliRunner, Result

import streamplane.cli.dlq as cli_dlq
from streamplane.client.dlq import DeadLetter, DlqListing
from streamplane.client.partition_state import PartitionKey

TOPIC = "sp.s.dlq.e1"


def listed(monkeypatch: pytest.MonkeyPatch, listing: DlqListing, *args: str) -> Result:
    """``dlq list s *args`` over ``listing``."""

    @contextmanager
    def connect(url: str, token: str | None) -> Iterator[object]:
        yield object()

    monkeypatch.setattr(cli_dlq, "connect", connect)
    monkeypatch.setattr(cli_dlq, "list_dead_letters", lambda client, stream, limit: listing)
    return CliRunner().invoke(cli_dlq.dlq, ["list", "s", *args])


def letters(n: int) -> list[DeadLetter]:
    return [DeadLetter("local-a", TOPIC, 0, i, None, b"v", {"lane": "realtime"}) for i in range(n)]


def test_json_past_the_limit_stays_a_list_and_stderr_says_more_follow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = listed(monkeypatch, DlqListing(letters(2), [], more=True), "--json", "--limit", "2")
    assert result.exit_code == 0, result.output
    assert [r["offset"] for r in json.loads(result.stdout)] == [0, 1]
    assert result.stderr == "the first 2 records: more follow (--limit N shows more)\n"


def test_json_within_the_limit_says_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    result = listed(monkeypatch, DlqListing(letters(2), []), "--json", "--limit", "5")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == 2 and result.stderr == ""


def test_json_gives_each_letters_origin(monkeypatch: pytest.MonkeyPatch) -> None:
    letter = DeadLetter(
        "local-a",
        TOPIC,
        0,
        4,
        None,
        b"v",
        {"cluster": "local-a", "topic": "sp.s.realtime.e1", "partition": "2", "offset": "41"},
    )
    result = listed(monkeypatch, DlqListing([letter], []), "--json")
    assert json.loads(result.stdout)[0]["origin"] == "local-a:sp.s.realtime.e1:2:41"


def test_a_missing_topic_is_not_said_to_be_a_cluster_that_does_not_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gone = PartitionKey("local-a", "sp.r9.dlq.e5", 0)
    result = listed(monkeypatch, DlqListing([], [gone], missing=frozenset({gone})))
    assert result.exit_code == 1
    assert str(result.exception) == (
        "the listing is incomplete: 1 of the dlq partitions on local-a could not be read: "
        "sp.r9.dlq.e5[0] (the topic is missing: the cluster answers without it)"
    )
