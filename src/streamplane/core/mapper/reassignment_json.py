"""Kafka's partition reassignment JSON, version 1.

The format ``kafka-reassign-partitions.sh --execute`` reads::

    {"version": 1,
     "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3],
                     "log_dirs": ["any", "any", "any"]}]}

``log_dirs`` is optional; when present it has one entry per replica ("any" lets the
broker choose). Writing is deterministic: partitions sorted by topic then partition,
keys in the order above.

A plan written by ``streamplane ops map`` may carry one more top-level key,
``"streamplane"``: an object of what the planner assumed that the partitions do not
say (``{"capacity": 68719476736}``: the storage per broker given with ``--capacity``,
``null`` when the brokers' own disk figures were used), so that ``ops apply`` shows
the same storage picture. Kafka's tools read only ``version`` and ``partitions``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streamplane.core.mapper.exceptions import MapperError, ReassignmentJsonError
from streamplane.core.mapper.models import Partition, PartitionMap, TopicPartition

REASSIGNMENT_VERSION = 1
ANY_LOG_DIR = "any"

_ENTRY_KEYS = frozenset({"topic", "partition", "replicas", "log_dirs"})
META_KEY = "streamplane"
"""The top-level key of what the planner assumed (see the module docstring)."""


def to_reassignment_json(
    partitions: Iterable[Partition],
    *,
    log_dirs: bool | Mapping[TopicPartition, Collection[str]] = False,
    indent: int | None = None,
    meta: Mapping[str, Any] | None = None,
) -> str:
    """Serialize partitions as a version-1 reassignment document.

    ``log_dirs=True`` writes ``"any"`` for every replica; a mapping gives explicit
    directories per partition (partitions missing from it get no ``log_dirs``).
    ``meta`` is written under ``"streamplane"`` (what the planner assumed).
    """
    entries: list[dict[str, Any]] = []
    for p in sorted(partitions, key=lambda p: p.key):
        entry: dict[str, Any] = {
            "topic": p.topic,
            "partition": p.partition,
            "replicas": list(p.replicas),
        }
        if log_dirs is True:
            entry["log_dirs"] = [ANY_LOG_DIR] * len(p.replicas)
        elif isinstance(log_dirs, Mapping) and p.key in log_dirs:
            dirs = list(log_dirs[p.key])
            if len(dirs) != len(p.replicas):
                raise MapperError(
                    f"{p.topic}-{p.partition}: {len(dirs)} log dirs for {len(p.replicas)} replicas"
                )
            entry["log_dirs"] = dirs
        entries.append(entry)
    document: dict[str, Any] = {"version": REASSIGNMENT_VERSION, "partitions": entries}
    if meta is not None:
        document[META_KEY] = dict(meta)
    if indent is None:
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    return json.dumps(document, indent=indent, ensure_ascii=False)


@dataclass(frozen=True)
class ParsedReassignment:
    """A validated reassignment document."""

    partition_map: PartitionMap
    log_dirs: Mapping[TopicPartition, tuple[str, ...]]
    meta: Mapping[str, Any] = field(default_factory=dict)
    """What the planner assumed (the ``"streamplane"`` object; empty when absent)."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_reassignment_json(
    text: str | bytes,
    *,
    known_brokers: Collection[int] | None = None,
    current: PartitionMap | None = None,
    allow_mixed_replication: bool = False,
) -> ParsedReassignment:
    """Parse and validate a reassignment document; every problem is reported at once.

    - ``known_brokers``: replicas on any other broker id are rejected.
    - ``current``: partitions it does not contain are rejected, and sizes are copied
      from it into the returned map.
    - Partitions of one topic must list the same number of replicas unless
      ``allow_mixed_replication`` (Kafka accepts it; it is nearly always a mistake).
    """
    try:
        document = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReassignmentJsonError([f"not JSON: {exc}"]) from exc
    problems: list[str] = []
    if not isinstance(document, dict):
        raise ReassignmentJsonError(["the document must be a JSON object"])
    version = document.get("version")
    if version != REASSIGNMENT_VERSION or not _is_int(version):
        problems.append(f"version must be {REASSIGNMENT_VERSION}, got {version!r}")
    extra = sorted(set(document) - {"version", "partitions", META_KEY})
    if extra:
        problems.append(f"unknown top-level keys: {extra}")
    meta = document.get(META_KEY, {})
    if not isinstance(meta, dict):
        problems.append(f"'{META_KEY}' must be an object")
        meta = {}
    raw = document.get("partitions")
    if not isinstance(raw, list):
        problems.append("'partitions' must be a list")
        raise ReassignmentJsonError(problems)

    known = None if known_brokers is None else set(known_brokers)
    seen: set[TopicPartition] = set()
    lengths: dict[str, set[int]] = {}
    partitions: list[Partition] = []
    dirs_by_key: dict[TopicPartition, tuple[str, ...]] = {}
    for n, entry in enumerate(raw):
        where = f"partitions[{n}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be an object")
            continue
        unknown_keys = sorted(set(entry) - _ENTRY_KEYS)
        if unknown_keys:
            problems.append(f"{where}: unknown keys {unknown_keys}")
        topic, partition = entry.get("topic"), entry.get("partition")
        if not isinstance(topic, str) or not topic:
            problems.append(f"{where}: 'topic' must be a non-empty string")
            continue
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            problems.append(f"{where} ({topic}): 'partition' must be a non-negative integer")
            continue
        where = f"{topic}-{partition}"
        key = (topic, partition)
        if key in seen:
            problems.append(f"{where}: duplicate partition")
            continue
        seen.add(key)
        replicas = entry.get("replicas")
        if not isinstance(replicas, list) or not replicas:
            problems.append(f"{where}: 'replicas' must be a non-empty list")
            continue
        if not all(_is_int(r) and r >= 0 for r in replicas):
            problems.append(f"{where}: replicas {replicas} must be non-negative broker ids")
            continue
        if len(set(replicas)) != len(replicas):
            problems.append(f"{where}: replicas {replicas} contain a duplicate broker")
            continue
        if known is not None:
            missing = sorted(set(replicas) - known)
            if missing:
                problems.append(f"{where}: unknown broker(s) {missing}")
        if "log_dirs" in entry:
            dirs = entry["log_dirs"]
            if not isinstance(dirs, list) or not all(isinstance(d, str) and d for d in dirs):
                problems.append(f"{where}: 'log_dirs' must be a list of non-empty strings")
            elif len(dirs) != len(replicas):
                problems.append(
                    f"{where}: {len(dirs)} log_dirs for {len(replicas)} replicas "
                    "(lengths must match)"
                )
            else:
                dirs_by_key[key] = tuple(dirs)
        size = 0
        if current is not None:
            existing = current.get(topic, partition)
            if existing is None:
                problems.append(f"{where}: not a partition of the current map")
            else:
                size = existing.size
        lengths.setdefault(topic, set()).add(len(replicas))
        partitions.append(Partition(topic, partition, tuple(replicas), size))
    if not allow_mixed_replication:
        for topic in sorted(lengths):
            if len(lengths[topic]) > 1:
                problems.append(
                    f"{topic}: partitions list different replica counts "
                    f"{sorted(lengths[topic])} (inconsistent replication factor)"
                )
    if problems:
        raise ReassignmentJsonError(problems)
    return ParsedReassignment(PartitionMap(partitions), dirs_by_key, meta)
