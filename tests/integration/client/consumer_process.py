"""A StreamConsumer in its own process, for kill -9 tests.

    python consumer_process.py URL TOKEN STREAM GROUP OUT_FILE

Writes one line per handled record ("partition offset value") and flushes it before
acking. Records whose value is a multiple of 500 are nacked once (retried after 3 s),
so the committed state has settled ranges above the low watermark.
"""

from __future__ import annotations

import sys

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.control_plane import ControlPlaneClient


def main() -> None:
    url, token, stream, group, out_path = sys.argv[1:6]
    client = ControlPlaneClient(url, token=token)
    consumer = StreamConsumer(
        stream, group, client, retry_backoff=3.0, max_attempts=5, commit_interval_s=0.5
    )
    with open(out_path, "a", buffering=1) as out:

        def handle(msg: StreamMessage) -> None:
            n = int(msg.value or b"-1")
            if n % 500 == 0 and msg.attempts == 0:
                raise RuntimeError("not yet")
            out.write(f"{msg.partition} {msg.offset} {n}\n")
            out.flush()

        consumer.run(handle)


if __name__ == "__main__":
    main()
