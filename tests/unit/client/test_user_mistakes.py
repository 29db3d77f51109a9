"""Mistakes an application makes with the client, each told clearly and none losing a
record (found by a first-time user of the library)."""

from __future__ import annotations

import dataclasses
import threading
import warnings
from typing import Any

import pytest
from confluent_kafka import Message

from streamplane.client.consumer import StreamConsumer, StreamMessage, _LaneBuffer
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.membership import GroupMembership
from streamplane.client.partition_state import PartitionKey, PartitionState
from streamplane.client.routing_watch import RoutingWatcher
from streamplane.core.routing import DLQ_LANE, new_routing_table
from streamplane.exceptions import ConfigError, NotFound
from tests.unit.client.harness import DlqBroker, consumer_of, stand_in_consumer
from tests.waiting import wait_for


async def handle_async(msg: StreamMessage) -> None:
    pass


class AsyncHandler:
    async def __call__(self, msg: StreamMessage) -> None:
        pass


def refused_by_run(handler: Any, records: int = 3) -> tuple[str, PartitionState, DlqBroker]:
    """``run(handler)`` over ``records`` fetched records, stopped after 5 s if it took the
    handler: the ConfigError's text ("" if none), the partition and the dlq stand-in."""
    broker = DlqBroker()
    c, state = consumer_of(records, broker)
    stop = threading.Event()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            c.run(handler, stop=stop)
        except ConfigError as exc:
            raised.append(exc)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # old code: "never awaited"
        thread = threading.Thread(target=run)
        thread.start()
        thread.join(5)  # a run that took the handler runs until stopped
        stop.set()
        thread.join(5)
    c.poll_batch(10, 0)  # housekeeping: what was settled is applied
    return (str(raised[0]) if raised else ""), state, broker


@pytest.mark.parametrize("handler", [handle_async, AsyncHandler()], ids=["function", "__call__"])
def test_run_refuses_an_async_handler(handler: Any) -> None:
    """It acked every record without running the handler's body (only Python's "never
    awaited" warning said so)."""
    error, state, _ = refused_by_run(handler)
    assert "coroutine function" in error
    assert state.unsettled() == 3  # nothing was acked


@pytest.mark.parametrize("handler", [None, 42, "handle"])
def test_run_refuses_a_handler_that_is_not_callable(handler: Any) -> None:
    """Before anything is read (an exploratory run: ``run(None)`` and ``run(42)``
    returned normally having dead-lettered the whole stream, "TypeError: 'NoneType'
    object is not callable" as the last error)."""
    error, state, broker = refused_by_run(handler)
    assert f"the handler must be callable (given each StreamMessage), not {handler!r}" in error
    assert state.unsettled() == 3 and broker.written == []


def test_a_handler_that_returns_a_coroutine_nacks_with_the_reason() -> None:
    c, state = consumer_of(1, DlqBroker())
    stop = threading.Event()

    def handler(msg: StreamMessage) -> Any:
        stop.set()
        return handle_async(msg)  # not awaited: the record was not handled

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the coroutine is closed: no "never awaited"
        c.run(handler, stop=stop)
        c.poll_batch(10, 0)  # housekeeping counts the nack
    assert c.stats["nacked"] == 1 and c.stats["acked"] == 0
    assert state.unsettled() == 1


@pytest.mark.parametrize(
    "setting", ["retry_backoff", "max_retry_backoff", "commit_interval_s", "heartbeat_interval_s"]
)
def test_seconds_that_are_no_number_are_a_config_error(setting: str) -> None:
    with pytest.raises(ConfigError, match=f"{setting} must be a number of seconds, not '1'"):
        StreamConsumer("s", "g", None, **{setting: "1"})  # type: ignore[arg-type]


def test_run_refuses_a_concurrency_that_is_no_int() -> None:
    c, _ = consumer_of(1, DlqBroker())
    stopped = threading.Event()
    stopped.set()  # a run that took it returns at once
    with pytest.raises(ConfigError, match="concurrency must be an int"):
        c.run(lambda msg: None, concurrency=2.5, stop=stopped)  # type: ignore[arg-type]


def test_rejecting_a_dead_letter_settles_it_instead_of_writing_it_again() -> None:
    """A consumer of the dlq lane that rejected (or ran out of attempts) wrote each
    record back to the dlq lane, read it again, and so on: 20 dead letters became
    1,000 in 8 s."""
    broker = DlqBroker(ack_at_poll=True)
    c = stand_in_consumer(broker)
    c._lanes, c._lane_order = ["default", DLQ_LANE], {"default": 0, DLQ_LANE: 1}
    c._buffers = [_LaneBuffer(), _LaneBuffer()]
    c._reads_dlq = True
    dlq_key = PartitionKey("local-a", "sp.s.dlq.e1", 0)
    state = PartitionState(dlq_key, DLQ_LANE, 1)
    state.restore(None, 0)
    c._states[dlq_key] = state
    c._states_by_cluster["local-a"][(dlq_key.topic, 0)] = state
    c._accept(
        "local-a",
        [
            Message(topic=dlq_key.topic, partition=0, offset=o, value=b"x", timestamp=(1, o))
            for o in range(4)
        ],
    )
    got = c.poll_batch(10, 0)
    assert [m.lane for m in got] == [DLQ_LANE] * 4
    got[0].reject("still bad")
    got[1].nack("bad")  # max_attempts=2: out of attempts on its second nack
    got[2].ack()
    got[3].ack()
    c.poll_batch(10, 0)
    (again,) = wait_for("the nacked dead letter again", lambda: c.poll_batch(10, 0), 5)
    again.nack("bad")
    c.poll_batch(10, 0)
    assert broker.written == []  # nothing written back to the dlq lane
    assert state.unsettled() == 0 and c.stats["rejected"] == 2


def test_a_heartbeat_interval_too_long_for_the_lease_is_shortened() -> None:
    """Beating every 2 s against a 1.5 s lease, the member lost its units between beats,
    every time (and a second member never got any)."""

    class Answers:
        def group_heartbeat(self, *args: object, **kwargs: object) -> dict[str, Any]:
            return {"work_units": [], "release": [], "lease_s": 1.5, "generation": 1}

    member = GroupMembership(
        Answers(),  # type: ignore[arg-type]
        "g",
        "s",
        ["realtime"],
        interval_s=2.0,
    )
    member._beat()
    assert member.interval_s == pytest.approx(0.5)
    member._beat()  # and no further
    assert member.interval_s == pytest.approx(0.5)


@pytest.mark.parametrize("name", ["", ".", ".."])
def test_dot_names_do_not_change_the_request_path(name: str) -> None:
    """``describe_stream(".")`` listed every stream (the HTTP client drops '.' segments),
    and ``streams describe .`` failed with a traceback."""
    client = ControlPlaneClient("http://127.0.0.1:9", token="t", timeout=0.5)
    with pytest.raises(ConfigError, match="invalid name"):
        client.describe_stream(name)
    with pytest.raises(ConfigError, match="invalid name"):
        client.routing(name)


def test_the_routing_watch_ends_when_the_stream_is_deleted() -> None:
    """It logged "routing watch ... failed: unknown stream" every 2 s, forever, and the
    producers went on taking records."""
    table = new_routing_table("s", ["realtime"], "local-a", 1)

    class ControlPlane:
        calls = 0

        def routing(self, stream: str) -> Any:
            return table

        def watch_routing(self, stream: str, after_epoch: int, timeout: float) -> Any:
            self.calls += 1
            raise NotFound("unknown stream 's'")

    cp = ControlPlane()
    watcher = RoutingWatcher(cp, "s")  # type: ignore[arg-type]
    told: list[str] = []
    watcher.add_gone_listener(told.append)
    watcher.start()
    assert watcher._thread is not None
    watcher._thread.join(5)
    assert not watcher._thread.is_alive() and cp.calls == 1
    assert watcher.gone is not None and "stream 's' was deleted" in watcher.gone
    assert told == [watcher.gone]
    assert watcher.table is table  # the last routing stays readable


class Queue:
    """A producer as its heartbeat sees it: how many records it has queued."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def poll(self, timeout: float = 0) -> int:
        return 0


def test_a_producer_reports_the_epoch_it_still_has_records_queued_for() -> None:
    """Heartbeats reported the new epoch as soon as the routing changed, while records
    queued for the cluster the stream left were still being delivered: the sealer
    sealed the old segment with ~1,800 of them on the way (they landed past its sealed
    end). The heartbeat now tells the oldest epoch with records still queued."""
    from streamplane.client.producer import StreamProducer

    producer = StreamProducer("s", None)  # type: ignore[arg-type]
    old, new = Queue(1800), Queue(5)
    producer._producers = {"local-a": old}  # type: ignore[dict-item]
    producer._epoch = 3
    table = dataclasses.replace(new_routing_table("s", ["realtime"], "local-b", 1), epoch=4)
    producer._producer_for = lambda cluster: new  # type: ignore[assignment,method-assign,return-value]
    producer._apply(table)
    assert producer.epoch == 4
    assert producer._reported_epoch() == 3  # 1,800 records still queued for epoch 3
    old.n = 0
    assert producer._reported_epoch() == 4
    producer._serve_retired()
    assert producer._retired == [] and producer._retired_epochs == {}


def test_a_lane_moved_off_a_cluster_the_dlq_stays_on_is_told_until_its_queue_is_empty() -> None:
    """A failover of the lanes but not the dlq (the CLI's default): the old cluster's
    producer stays, for the dlq, with the moved lane's records still queued. It reported
    the new epoch at once, and an exploratory run saw the old segment sealed 2 s later
    and retired with 1,000 records still queued for it (lost)."""
    from streamplane.client.producer import StreamProducer
    from streamplane.core.routing import move_lanes

    a, b = Queue(0), Queue(0)
    producer = StreamProducer("s", None)  # type: ignore[arg-type]
    producer._producer_for = lambda cluster: {"local-a": a, "local-b": b}[cluster]  # type: ignore[assignment,method-assign,return-value]
    table = new_routing_table("s", ["realtime"], "local-a", 1)
    producer._apply(table)
    producer._producers = {"local-a": a}  # type: ignore[dict-item]
    a.n = 1000  # queued for sp.s.realtime.e1
    moved = move_lanes(table, ["realtime"], "local-b")
    producer._apply(moved)
    producer._producers["local-b"] = b  # type: ignore[assignment]
    assert producer.epoch == moved.epoch
    assert producer._retired == []  # local-a stays: the dlq lane is there
    assert producer._reported_epoch() == table.epoch
    a.n = 0
    producer._serve_retired()
    a.n = 3  # dead letters queued since: not the moved lane's
    assert producer._reported_epoch() == moved.epoch
