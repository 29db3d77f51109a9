from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamplane.client.retry_schedule import RetrySchedule


def test_batches_come_due_after_their_delay_in_order() -> None:
    s: RetrySchedule[str] = RetrySchedule()
    s.add(["a1", "a2"], 0.2, now=10.0)
    s.add(["b"], 0.1, now=10.0)
    s.add(["c"], 0.2, now=10.05)
    assert len(s) == 4
    assert s.pop_due(10.09) == []
    assert s.pop_due(10.1) == [["b"]]
    assert s.pop_due(10.2) == [["a1", "a2"]]
    assert len(s) == 1
    assert s.pop_due(100.0) == [["c"]]
    assert len(s) == 0
    assert not s


def test_discard_forgets_matching_items_and_empty_batches() -> None:
    s: RetrySchedule[int] = RetrySchedule()
    s.add([1, 2, 3], 0.1, now=0.0)
    s.add([4], 0.1, now=0.0)
    s.add([5, 6], 0.2, now=0.0)
    assert s.discard(lambda i: i % 2 == 0) == 3
    assert len(s) == 3
    assert s.pop_due(1.0) == [[1, 3], [5]]
    assert len(s) == 0


@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.05, 0.1, 0.2, 30.0]),
            st.floats(0, 1),
            st.integers(1, 4),
        ),
        max_size=60,
    ),
    st.lists(st.floats(0, 100), max_size=10),
    st.integers(0, 5),
)
def test_pop_due_releases_exactly_what_is_due(
    adds: list[tuple[float, float, int]], polls: list[float], discard_mod: int
) -> None:
    """Against a plain model: with a clock that only moves forward, every item is
    released at the first poll at or after its due time, never twice, and never once
    discarded."""
    s: RetrySchedule[int] = RetrySchedule()
    now = 0.0
    due_at: dict[int, float] = {}
    for delay, step, size in adds:
        now += step
        batch = list(range(len(due_at), len(due_at) + size))
        s.add(batch, delay, now)
        for i in batch:
            due_at[i] = now + delay
    if discard_mod:
        dropped = {i for i in due_at if i % (discard_mod + 1) == 0}
        assert s.discard(lambda i: i in dropped) == len(dropped)
        for i in dropped:
            del due_at[i]
    released: set[int] = set()
    for t in sorted(now + p for p in polls):
        got = [i for batch in s.pop_due(t) for i in batch]
        assert len(got) == len(set(got))
        assert set(got) == {i for i, d in due_at.items() if d <= t} - released
        released.update(got)
        assert len(s) == len(due_at) - len(released)
