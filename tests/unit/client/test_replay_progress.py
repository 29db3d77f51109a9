"""`dlq replay` tells its progress once per batch (an exploratory run: its final
"... N replayed" line came twice, the run's last, empty batch telling the count again)."""

from __future__ import annotations

from typing import Any

import pytest

from streamplane.client.dlq import replay_dead_letters
from tests.unit.client.test_dlq_replay import DlqPartition, fake  # noqa: F401 (a fixture)


@pytest.mark.parametrize(("letters", "told"), [(1000, [500, 1000]), (0, []), (3, [3])])
def test_each_count_is_told_once(fake: Any, letters: int, told: list[int]) -> None:  # noqa: F811
    client, _ = fake(DlqPartition(letters))
    progress: list[int] = []
    assert (
        replay_dead_letters(client, "s", idle_s=0.3, progress=progress.append).replayed == letters
    )
    assert progress == told
