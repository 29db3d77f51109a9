"""A member joins a group whose members are handling records with a slow downstream:
the units moved to it are handed over without any record handled by two members.

Found by an exploratory run: 3 replicas of a service, each ``run(handler,
concurrency=8)``, a handler calling a flaky downstream that sometimes takes 0.2-1 s,
200 records/s, replicas scaled 3 -> 1 -> 4: 29 records handled twice (0.15%), all within
~0.5 s of a member joining, some by two members at once. A unit was handed back at the
holder's next poll after the Assigner asked for it: the records of it in ``run``'s
threads were still being handled (and those queued for the threads were handled after
it had gone), their acks lost, and the new holder read them again from the commit made
before. Now the holder stops reading the unit and hands it back once those records are
done, their acks committed first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from streamplane.client.producer import StreamProducer
from tests.integration.groups.test_assigner import owners
from tests.waiting import wait_for

MEMBER_PROCESS = Path(__file__).parent / "slow_downstream_member.py"
RATE = 100  # records/s produced


def handled(path: Path) -> list[tuple[str, float, float]]:
    """(value, start, end) of each record a member handled."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5:  # a line being written is left for the next read
            out.append((parts[0], float(parts[3]), float(parts[4])))
    return out


def test_a_member_joining_takes_units_over_without_records_handled_twice(
    control_plane: Any, stream_factory: Any, tmp_path: Path
) -> None:
    client = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=6, lanes=("realtime",))
    group = f"g-{uuid.uuid4().hex[:6]}"
    paths = [os.environ.get("PYTHONPATH", ""), str(Path(__file__).parents[3])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    out = {name: tmp_path / f"{name}.txt" for name in ("a", "b", "c")}
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str) -> None:
        procs[name] = subprocess.Popen(
            [sys.executable, str(MEMBER_PROCESS), control_plane.url, control_plane.token,
             stream, group, f"member-{name}", str(out[name])],
            env=env,
        )  # fmt: skip

    producing = threading.Event()
    producing.set()
    sent = [0]

    def produce() -> None:
        with StreamProducer(stream, client) as producer:
            while producing.is_set():
                for _ in range(RATE // 10):
                    producer.send(str(sent[0]).encode(), key=str(sent[0]).encode())
                    sent[0] += 1
                time.sleep(0.1)

    def all_handled() -> bool:
        return len({v for path in out.values() for v, _, _ in handled(path)}) >= sent[0]

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        start("a")
        start("b")
        wait_for(
            "the units shared by a and b",
            lambda: all(owners(client, group).get(f"member-{m}") for m in "ab"),
            30,
        )
        wait_for("a and b handling records", lambda: all(handled(out[m]) for m in "ab"), 30)
        time.sleep(2)  # slow records in every member's threads
        joined_at = time.time()
        start("c")  # the Assigner moves units of a and b to c
        wait_for("c handling records", lambda: handled(out["c"]), 30)
        time.sleep(2)
        producing.clear()
        producer.join(10)
        wait_for("every record handled", all_handled, 60)
    finally:
        producing.clear()
        producer.join(10)
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
    by_value: dict[str, list[tuple[str, float, float]]] = {}
    for name, path in out.items():
        for value, started, ended in handled(path):
            by_value.setdefault(value, []).append((name, started, ended))
    twice = {v: h for v, h in by_value.items() if len({name for name, _, _ in h}) > 1}
    at_once = [
        v
        for v, h in twice.items()
        if any(
            m1 != m2 and s1 < e2 and s2 < e1
            for i, (m1, s1, e1) in enumerate(h)
            for m2, s2, e2 in h[i + 1 :]
        )
    ]
    near_join = [v for v, h in twice.items() if any(abs(s - joined_at) < 5 for _, s, _ in h)]
    print(
        f"{sent[0]} records, {len(twice)} handled by two members ({len(near_join)} within "
        f"5 s of the join), {len(at_once)} of them at the same time"
    )
    assert at_once == []
    assert twice == {}
