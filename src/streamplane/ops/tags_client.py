"""Broker and topic tags through the control plane's HTTP API (``controlplane/tags_api.py``).

A thin companion of ``ControlPlaneClient``: it shares the client's connection pool,
token and error mapping (``NotFound``, ``Conflict``, ``Unauthorized``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from streamplane.client.control_plane import KAFKA_CALL_TIMEOUT, ControlPlaneClient
from streamplane.exceptions import ConfigError


def _seg(name: str) -> str:
    return quote(name, safe="")


def _kind_path(kind: str) -> str:
    if kind not in ("broker", "topic"):
        raise ConfigError(f"kind must be broker or topic, got {kind!r}")
    return "brokers" if kind == "broker" else "topics"


class TagsClient:
    """Tags of brokers and topics, and topic placement by broker tags."""

    def __init__(self, client: ControlPlaneClient) -> None:
        self._cp = client

    def set_tags(
        self, cluster: str, kind: str, name: str | int, tags: Mapping[str, str]
    ) -> dict[str, Any]:
        """Replace the tags of broker ``name`` (an id) or topic ``name``."""
        path = f"/v1/clusters/{_seg(cluster)}/{_kind_path(kind)}/{_seg(str(name))}/tags"
        return self._cp._json(  # type: ignore[no-any-return]
            "PUT", path, json={"tags": dict(tags)}, timeout=KAFKA_CALL_TIMEOUT
        )

    def list_tagged(
        self, cluster: str, kind: str, tags: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Brokers (with their rack as an implicit tag) or tagged topics having all ``tags``."""
        params = [("tag", f"{k}:{v}") for k, v in (tags or {}).items()]
        path = f"/v1/clusters/{_seg(cluster)}/{_kind_path(kind)}"
        return self._cp._json(  # type: ignore[no-any-return]
            "GET", path, params=params, timeout=KAFKA_CALL_TIMEOUT
        )

    def create_topic(
        self,
        cluster: str,
        topic: str,
        *,
        partitions: int = 1,
        replication_factor: int = 1,
        broker_tags: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
        config: Mapping[str, str] | None = None,
        min_rack_ids: int | None = None,
    ) -> dict[str, Any]:
        """Create ``topic`` on the brokers having every one of ``broker_tags``."""
        body: dict[str, Any] = {
            "name": topic,
            "partitions": partitions,
            "replication_factor": replication_factor,
            "broker_tags": dict(broker_tags or {}),
            "tags": dict(tags or {}),
            "config": dict(config or {}),
        }
        if min_rack_ids is not None:
            body["min_rack_ids"] = min_rack_ids
        path = f"/v1/clusters/{_seg(cluster)}/topics"
        return self._cp._json(  # type: ignore[no-any-return]
            "POST", path, json=body, timeout=KAFKA_CALL_TIMEOUT
        )
