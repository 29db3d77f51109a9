"""The control plane taken away under load: data keeps flowing, nothing is lost.

    .venv/bin/python bench/control_plane_outage.py [--outage 60] [--rate 1000]

A producer sends at ``--rate`` records/s to a 4-partition stream read by a group of two
StreamConsumers (Assigner leases). After 10 s the control plane is stopped for
``--outage`` seconds, then started again on the same port and database; production
goes on for 10 s more. Prints records handled during the outage (vs the clean 10 s
before it), lost records (must be 0), duplicates, and whether the group was rebuilt from
its members' claims after the restart.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter

from _stack import local_stack
from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.producer import StreamProducer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--outage", type=float, default=60.0)
    ap.add_argument("--rate", type=int, default=1000)
    args = ap.parse_args()
    with local_stack() as stack:
        client = stack.client
        client.create_stream("outage", "local-a", lanes=["realtime"], partitions=4)
        seen: Counter[int] = Counter()
        lock = threading.Lock()

        def handler(msg: StreamMessage) -> None:
            with lock:
                seen[int(msg.value or b"-1")] += 1

        stop = threading.Event()
        members = [StreamConsumer("outage", "outage-g", stack.control_plane.client())
                   for _ in range(2)]  # fmt: skip
        threads = [threading.Thread(target=m.run, args=(handler,), kwargs={"stop": stop})
                   for m in members]  # fmt: skip
        for t in threads:
            t.start()
        sent = 0
        with StreamProducer("outage", client) as producer:

            def send_for(seconds: float) -> int:
                nonlocal sent
                start, end = sent, time.monotonic() + seconds
                t0 = time.monotonic()
                while time.monotonic() < end:
                    ahead = t0 + (sent - start) / args.rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
                    producer.send(str(sent).encode(), key=str(sent).encode())
                    sent += 1
                producer.flush()
                return sent - start

            send_for(10)
            with lock:
                before = len(seen)
            stack.control_plane.stop()
            down_at = time.monotonic()
            sent_during = send_for(args.outage)
            with lock:
                during = len(seen) - before
            stack.control_plane.start()
            print(f"control plane down for {time.monotonic() - down_at:.0f} s", flush=True)
            send_for(10)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with lock:
                if len(seen) >= sent:
                    break
            time.sleep(0.2)
        group = client.describe_group("outage-g")
        stop.set()
        for t in threads:
            t.join(30)
        for m in members:
            m.close()
        lost = sent - len(seen)
        dups = sum(c - 1 for c in seen.values())
        print(
            f"sent {sent}; during the {args.outage:.0f} s outage: sent {sent_during}, "
            f"handled {during} ({during / max(1, sent_during):.2f} of what was sent)"
        )
        print(
            f"lost {lost}, handled twice {dups}; after the restart the group has "
            f"{len(group['members'])} members, generation {group['generation']}, "
            f"recovering={group['recovering']}"
        )


if __name__ == "__main__":
    main()
