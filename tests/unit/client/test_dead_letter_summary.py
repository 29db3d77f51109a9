"""``DeadLetterSummary``: when the dlq writer's summary of dead letters is due and what
it says (pure; ``test_client_logging.py`` has it inside a consumer)."""

from __future__ import annotations

from streamplane.client.dlq_writer import DeadLetterSummary


def test_the_summary_is_due_at_once_after_a_quiet_spell_then_every_30_s() -> None:
    letter = (object(), "why", 1)
    summary = DeadLetterSummary()
    assert summary.due("s", 100.0) is None  # nothing written
    summary.written([letter, letter], 100.0)
    assert summary.due("s", 100.0) == (
        "stream 's': 2 records dead-lettered in the last 1 s, last reason: why"
    )
    summary.written([letter], 101.0)
    summary.written([(object(), "another\nreason  " + "x" * 300, 1)], 110.0)
    assert summary.due("s", 129.9) is None
    told = summary.due("s", 130.0)
    assert told is not None
    assert told.startswith("stream 's': 2 records dead-lettered in the last 29 s, ")
    assert told.endswith("last reason: another reason ...")  # one line, shortened
    summary.written([letter], 131.0)
    assert summary.due("s", 140.0) is None
    assert summary.due("s", 140.0, last=True) == (  # the writer closes: told whatever
        "stream 's': 1 record dead-lettered in the last 9 s, last reason: why"
    )
    assert summary.due("s", 500.0, last=True) is None
