"""A member of a group whose handler calls a slow downstream now and then, in its own
process, for tests of what a join or a leave does to records being handled.

    python slow_downstream_member.py URL TOKEN STREAM GROUP MEMBER_ID OUT_FILE

Handles with ``run(concurrency=8)``: one record in 5 takes 0.2-1 s (the same records
in every member and every run: drawn from the record's offset), the others 5 ms.
Writes one line per handled record, "value partition offset start end" (``time.time()``
when the handler started and when it ended), flushed before the ack. SIGTERM stops the
run; the consumer closes (it commits and leaves) and the process ends.
"""

from __future__ import annotations

import random
import signal
import sys
import threading
import time
from types import FrameType

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.control_plane import ControlPlaneClient


def main() -> None:
    url, token, stream, group, member_id, out_path = sys.argv[1:7]
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    client = ControlPlaneClient(url, token=token)
    lock = threading.Lock()
    with (
        open(out_path, "a", buffering=1) as out,
        StreamConsumer(stream, group, client, member_id=member_id) as consumer,
    ):

        def handle(msg: StreamMessage) -> None:
            started = time.time()
            draw = random.Random(msg.partition * 1_000_003 + msg.offset)
            time.sleep(draw.uniform(0.2, 1.0) if draw.random() < 0.2 else 0.005)
            value = (msg.value or b"").decode()
            line = f"{value} {msg.partition} {msg.offset} {started} {time.time()}\n"
            with lock:
                out.write(line)
                out.flush()

        consumer.run(handle, concurrency=8, stop=stop)


if __name__ == "__main__":
    main()
