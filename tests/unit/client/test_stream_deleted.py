"""A consumer whose stream is deleted (``StreamConsumer`` over ``harness``, its routing
watch over a stand-in control plane).

Found by an exploratory run (an application following docs/client.md): after
``streams delete``, a running consumer's ``run`` went on for good with no records,
logging warnings only, while the producer raised NotFound "stream 's' was deleted"."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from streamplane.client.consumer import StreamMessage
from streamplane.exceptions import NotFound
from tests.unit.client.test_close_hand_out import closable_consumer_of


class DeletedStream:
    """The control plane once the stream is deleted: the routing watch's long poll
    answers 404."""

    def routing(self, stream: str) -> Any:
        return SimpleNamespace(epoch=3)

    def watch_routing(self, stream: str, epoch: int, timeout: float) -> Any:
        raise NotFound(f"stream {stream!r} not found")


@pytest.mark.parametrize("how", ["iterate", "run-sequential", "run-threads"])
def test_run_and_iteration_end_with_not_found_once_the_stream_is_deleted(how: str) -> None:
    """The watch hears of the deletion while record 10 is handled: the loop ends by
    raising NotFound (the records ``run``'s threads hold are handled first), nothing is
    committed from then on, and ``close`` returns."""
    c, commits = closable_consumer_of(50)
    c._watcher._client = DeletedStream()  # type: ignore[assignment]
    handled: list[int] = []
    committed_at_deletion: list[int] = []

    def handle(msg: StreamMessage) -> None:
        if msg.offset == 10:
            c._watcher.start()  # its first long poll answers 404
            for _ in range(500):  # until the watch has told the consumer (a guard: 5 s)
                if c._watcher.gone is not None:
                    break
                threading.Event().wait(0.01)
            committed_at_deletion.append(len(commits.committed))
        handled.append(msg.offset)
        msg.ack()

    raised: list[BaseException] = []
    stop = threading.Event()  # only for the test's own clean-up on the code before

    def consume() -> None:
        try:
            if how == "iterate":
                for msg in c:
                    handle(msg)
            else:
                c.run(handle, concurrency=1 if how == "run-sequential" else 4, stop=stop)
        except BaseException as exc:
            raised.append(exc)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    consumer.join(20)  # a hang guard: before, it never ended
    stop.set()
    assert not consumer.is_alive(), "the consumer went on after its stream was deleted"
    assert len(raised) == 1 and isinstance(raised[0], NotFound), raised
    assert "stream 's' was deleted" in str(raised[0])
    assert 10 in handled
    assert c.stats["delivered"] == len(handled)  # whatever was handed out was handled
    with pytest.raises(NotFound):  # the consumer stays so until closed
        c.poll_batch(10, 0)
    c.close()
    assert len(commits.committed) == committed_at_deletion[0]  # its topics are gone
