"""A member of a group in its own process, for tests that stop it (SIGSTOP) or kill it.

    python timed_member_process.py URL TOKEN STREAM GROUP MEMBER_ID OUT_FILE DELAY_S

Handles with ``run(concurrency=2)``: sleeps ``DELAY_S`` a record, writes one line per
handled record ("value partition offset time.time()") and flushes it before the ack.
SIGTERM closes the consumer (it commits and leaves) and ends the process.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from types import FrameType

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.control_plane import ControlPlaneClient


def main() -> None:
    url, token, stream, group, member_id, out_path, delay = sys.argv[1:8]
    delay_s = float(delay)
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    client = ControlPlaneClient(url, token=token)
    with (
        open(out_path, "a", buffering=1) as out,
        StreamConsumer(stream, group, client, member_id=member_id) as consumer,
    ):

        def handle(msg: StreamMessage) -> None:
            if delay_s:
                time.sleep(delay_s)
            out.write(f"{(msg.value or b'').decode()} {msg.partition} {msg.offset} {time.time()}\n")
            out.flush()

        consumer.run(handle, concurrency=2, stop=stop)


if __name__ == "__main__":
    main()
