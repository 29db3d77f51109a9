"""A member that was stopped past its lease (SIGSTOP: a paused VM, a long GC or swap)
does not hand out the records it had buffered for units that moved on meanwhile.

Found by an exploratory run: two members of a group, one stopped for 6 s and then
continued; within 0.5 s it handled 729 records of its prefetch buffer that the other
member, given its units after the lease ran out, had already handled. Only its commits
were fenced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from streamplane.client.producer import StreamProducer
from tests.integration.groups.test_assigner import owners
from tests.waiting import wait_for

MEMBER_PROCESS = Path(__file__).parent / "timed_member_process.py"
CONCURRENCY = 2  # timed_member_process.py's run


class Members:
    """A stream of 12,000 records on 4 partitions, and a group of member processes
    (``timed_member_process.py``), each handling a record per ``delays[name]`` seconds
    and writing what it handled to ``out[name]``."""

    def __init__(
        self, control_plane: Any, stream_factory: Any, tmp_path: Path, delays: dict[str, str]
    ) -> None:
        self.client = control_plane.client()
        stream = stream_factory(cluster="local-a", partitions=4, lanes=("realtime",))
        with StreamProducer(stream, self.client) as producer:
            for i in range(12_000):
                producer.send(str(i).encode(), key=str(i).encode())
        self.group = f"g-{uuid.uuid4().hex[:6]}"
        paths = [os.environ.get("PYTHONPATH", ""), str(Path(__file__).parents[3])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        self.out = {name: tmp_path / f"{name}.txt" for name in delays}
        self.procs = {
            name: subprocess.Popen(
                [sys.executable, str(MEMBER_PROCESS), control_plane.url, control_plane.token,
                 stream, self.group, f"member-{name}", str(self.out[name]), delay],
                env=env,
            )
            for name, delay in delays.items()
        }  # fmt: skip

    def owners(self) -> dict[str, set[str]]:
        return owners(self.client, self.group)

    def wait_until_shared(self, name: str) -> set[int]:
        """Until every member holds units and ``name`` has handled 300 records: the
        partitions ``name`` holds then."""

        def shared() -> bool:
            now = self.owners()
            return all(now.get(f"member-{m}") for m in self.procs)

        wait_for("the units shared by the members", shared, 30)
        wait_for(f"member {name} handling records", lambda: self.count(name) >= 300, 30)
        return {int(u.rsplit("/", 1)[1]) for u in self.owners()[f"member-{name}"]}

    def count(self, name: str) -> int:
        return len(handled(self.out[name]))

    def stop(self) -> None:
        """Continue (SIGCONT) and end every member still running."""
        for p in self.procs.values():
            p.send_signal(signal.SIGCONT)
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def handled(path: Path) -> list[tuple[str, int, float]]:
    """(value, partition, when) of each record a member handled."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:  # a line being written is left for the next read
            out.append((parts[0], int(parts[1]), float(parts[3])))
    return out


def test_a_member_stopped_past_its_lease_does_not_hand_out_units_it_lost(
    control_plane: Any, stream_factory: Any, tmp_path: Path
) -> None:
    # b is slow (1 ms a record): its buffer is full of its units' backlog when it is
    # stopped. a is fast: through its own backlog, it handles b's units, from b's last
    # commit, while b is stopped.
    members = Members(control_plane, stream_factory, tmp_path, {"a": "0", "b": "0.001"})
    out, b = members.out, members.procs["b"]
    try:
        b_units = members.wait_until_shared("b")
        os.kill(b.pid, signal.SIGSTOP)
        stopped_at = time.time()
        time.sleep(6)
        os.kill(b.pid, signal.SIGCONT)
        continued_at = time.time()
        time.sleep(3)
    finally:
        members.stop()
    by_a = handled(out["a"])
    first_by_a: dict[str, float] = {}
    for value, _, when in by_a:
        first_by_a.setdefault(value, when)
    taken_over = [v for v, p, when in by_a if p in b_units and stopped_at < when < continued_at]
    after = [(v, when) for v, _, when in handled(out["b"]) if when >= continued_at]
    again = [v for v, when in after if first_by_a.get(v, when) < when]
    print(
        f"member a handled {len(taken_over)} records of b's units while b was stopped; "
        f"b handled {len(after)} after it continued, {len(again)} of them handled by a before"
    )
    assert taken_over, "member a never took over b's units: nothing was tested"
    # At most the records b had handed to its handlers before it was stopped (run's
    # pool holds two a thread, and one waits for a slot): not its buffered fetches.
    assert len(again) <= 2 * CONCURRENCY + 1, again[:20]


def test_units_given_back_to_a_member_whose_lease_expired_are_read_afresh(
    control_plane: Any, stream_factory: Any, tmp_path: Path
) -> None:
    """b is stopped past its lease, a takes b's units over and handles part of them, then
    a leaves. When b continues, the control plane admits it again and gives it every
    unit, its old ones among them. b used to take those as kept and hand out its buffered
    records of them, which a had handled; it now reads them afresh from a's commits."""
    # a is a little slow too (0.2 ms a record), so that it is still working through b's
    # units when it leaves.
    members = Members(control_plane, stream_factory, tmp_path, {"a": "0.0002", "b": "0.001"})
    out, a, b = members.out, members.procs["a"], members.procs["b"]
    try:
        b_units = members.wait_until_shared("b")
        os.kill(b.pid, signal.SIGSTOP)
        stopped_at = time.time()

        def a_took_over() -> bool:
            return (
                sum(1 for _, p, when in handled(out["a"]) if p in b_units and when > stopped_at)
                >= 500
            )

        wait_for("member a handling b's units", a_took_over, 60)
        a.terminate()  # a commits what it handled and leaves: every unit is free
        a.wait(30)
        left_at = time.time()
        os.kill(b.pid, signal.SIGCONT)
        wait_for(
            "member b admitted again with every unit",
            lambda: len(members.owners().get("member-b", ())) == 4,
            30,
        )
        time.sleep(3)
    finally:
        members.stop()
    by_a = {v for v, _, _ in handled(out["a"])}
    taken_over = [v for v, p, when in handled(out["a"]) if p in b_units and when > stopped_at]
    after = [v for v, _, when in handled(out["b"]) if when >= left_at]
    again = [v for v in after if v in by_a]
    print(
        f"member a handled {len(taken_over)} records of b's units while b was stopped; "
        f"b handled {len(after)} after it continued, {len(again)} of them handled by a"
    )
    assert taken_over, "member a never took over b's units: nothing was tested"
    assert after, "member b handled nothing after it continued: nothing was tested"
    # At most what b had handed to its handlers before it was stopped (see above).
    assert len(again) <= 2 * CONCURRENCY + 1, again[:20]
