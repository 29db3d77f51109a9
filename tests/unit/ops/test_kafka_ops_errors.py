"""kafka-python errors as streamplane errors: the broker's words, not the dumps."""

from __future__ import annotations

from typing import Any

import kafka.errors as kerr
import pytest

from streamplane.exceptions import KafkaError
from streamplane.ops.kafka_ops import KafkaOpsAdmin, error_from

# What kafka-python 2.x raised for a topic config the broker does not know (measured).
FAILED_CREATE = (
    "Request 'CreateTopicsRequest(version=7, topics=[CreatableTopic(name='t', "
    "num_partitions=-1, replication_factor=-1, assignments=[], configs=["
    "CreatableTopicConfig(name='bogus.key', value='1')])], timeout_ms=30000, "
    "validate_only=False)' failed with response 'CreateTopicsResponse(version=7, "
    "throttle_time_ms=0, topics=[CreatableTopicResult(version=7, name='t', topic_id=None, "
    "error_code=40, error_message='Unknown topic config name: bogus.key', "
    "topic_config_error_code=0, num_partitions=-1, replication_factor=-1, configs=[])])'."
)


def test_a_failed_response_is_told_by_the_broker_s_message() -> None:
    err = error_from(kerr.InvalidConfigurationError(FAILED_CREATE), "create topic t on h:1")
    assert str(err) == (
        "create topic t on h:1: [Error 40] InvalidConfigurationError: "
        "Unknown topic config name: bogus.key"
    )
    assert err.code == "INVALID_CONFIG"


def test_other_errors_keep_their_text() -> None:
    err = error_from(kerr.UnknownTopicOrPartitionError("no such topic"), "describe t")
    assert "no such topic" in str(err) and "UnknownTopicOrPartitionError" in str(err)
    assert str(error_from(kerr.KafkaTimeoutError, "connect")) == "connect: KafkaTimeoutError"


def test_an_unreachable_cluster_is_told_after_the_connect_timeout_not_the_request_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`ops map rebalance --bootstrap` at a closed port said nothing for 30 s (the request
    timeout bounded the bootstrap too): the bootstrap has a timeout of its own, 10 s."""
    import kafka.admin

    seen: dict[str, Any] = {}

    def refuse(**conf: Any) -> None:
        seen.update(conf)
        raise kerr.KafkaTimeoutError("Unable to bootstrap from ['127.0.0.1:1']")

    monkeypatch.setattr(kafka.admin, "KafkaAdminClient", refuse)
    with pytest.raises(KafkaError, match=r"connect to 127\.0\.0\.1:1: KafkaTimeoutError"):
        KafkaOpsAdmin("127.0.0.1:1")
    assert (seen["bootstrap_timeout_ms"], seen["request_timeout_ms"]) == (10_000, 30_000)
    with pytest.raises(KafkaError):
        KafkaOpsAdmin("127.0.0.1:1", request_timeout_s=4.0)
    assert seen["bootstrap_timeout_ms"] == 4_000  # never above the request timeout
