from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamplane.client.retry_schedule import RetrySchedule


def test_items_come_due_after_their_delay_in_order() -> None:
    s: RetrySchedule[str] = RetrySchedule()
    s.add("a", 0.2, now=10.0)
    s.add("b", 0.1, now=10.0)
    s.add("c", 0.2, now=10.05)
    assert len(s) == 3
    assert s.pop_due(10.09) == []
    assert s.pop_due(10.1) == ["b"]
    assert s.pop_due(10.2) == ["a"]
    assert len(s) == 1
    assert s.pop_due(100.0) == ["c"]
    assert len(s) == 0
    assert not s


@given(
    st.lists(
        st.tuples(st.sampled_from([0.0, 0.05, 0.1, 0.2, 30.0]), st.floats(0, 1)),
        max_size=60,
    ),
    st.lists(st.floats(0, 100), max_size=10),
)
def test_pop_due_releases_exactly_what_is_due(
    adds: list[tuple[float, float]], polls: list[float]
) -> None:
    """Against a plain model: with a clock that only moves forward, every item is
    released at the first poll at or after its due time, and never twice."""
    s: RetrySchedule[int] = RetrySchedule()
    now = 0.0
    due_at: dict[int, float] = {}
    for i, (delay, step) in enumerate(adds):
        now += step
        s.add(i, delay, now)
        due_at[i] = now + delay
    released: set[int] = set()
    for t in sorted(now + p for p in polls):
        got = s.pop_due(t)
        assert {i for i in got} == {i for i, d in due_at.items() if d <= t} - released
        released.update(got)
        assert len(s) == len(due_at) - len(released)
