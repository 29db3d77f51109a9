"""A StreamConsumer in its own process whose SIGTERM handler calls ``close()``, as
docs/client.md's "Stopping a consumer or producer" recipe says.

    python sigterm_consumer_process.py URL TOKEN STREAM GROUP OUT_FILE iterate|run

Consumes on the main thread (iterating, or ``run(concurrency=4)``), writes one line
per handled record ("partition offset") to OUT_FILE before acking it, and prints
"exited" once the consumer's block is left.
"""

from __future__ import annotations

import signal
import sys
import threading

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.control_plane import ControlPlaneClient


def main() -> None:
    url, token, stream, group, out_path, how = sys.argv[1:7]
    client = ControlPlaneClient(url, token=token)
    lock = threading.Lock()
    with open(out_path, "a", buffering=1) as out:

        def handle(msg: StreamMessage) -> None:
            with lock:
                out.write(f"{msg.partition} {msg.offset}\n")
                out.flush()

        with StreamConsumer(stream, group, client, commit_interval_s=60) as consumer:
            signal.signal(signal.SIGTERM, lambda *_: consumer.close())
            if how == "iterate":
                for msg in consumer:
                    handle(msg)
                    msg.ack()
            else:
                consumer.run(handle, concurrency=4)
    print("exited", flush=True)


if __name__ == "__main__":
    main()
