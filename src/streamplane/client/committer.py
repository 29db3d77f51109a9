"""Commits of a consumer's progress, on a thread of their own.

The consuming thread takes each partition's ``PartitionProgress`` (an immutable
snapshot) under its lock and hands it here; this thread encodes it, spills it when it
does not fit, and waits for the broker. So the consuming thread never waits for a
commit's round trip (measured 7-24 ms per commit) or a spill's write (10-130 ms, the
first one including the side topic's set-up) while records are waiting.

- A partition's newer snapshot replaces an older one not committed yet: each is the
  complete state, so committing only the latest loses nothing.
- ``submit(..., wait=True)`` returns once everything submitted so far is committed
  (or failed): ``StreamConsumer.commit``, the commit before giving partitions up and
  the one at close.
- A commit that fails leaves its partitions in ``failed``; the consumer marks them
  dirty again at its next commit, so they are committed again (never dropped).
- A commit to one cluster runs on a thread of its own and is waited for at most
  ``cluster_wait_s`` (5 s): librdkafka holds a synchronous commit until the group's
  coordinator answers, so a commit to a dead cluster blocked this thread, and with it
  every other cluster's commits, ``StreamConsumer.commit`` and ``close``, for the whole
  outage (measured: 45 s, the length of the outage). A commit still running then
  counts as failed, and its cluster is skipped (its partitions failed at once) until
  that commit returns; ``busy`` names the clusters whose client it still uses.
- ``committable`` (the consumer's group membership) is asked as a commit is sent, not
  when it was submitted: a partition it does not name is not committed (failed, and
  dropped by the consumer if it no longer reads it). A commit submitted just before
  the process was stopped (SIGSTOP, a long pause) went out after it resumed, for
  partitions its lease had lost meanwhile, over their new holder's progress.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Protocol

from streamplane.client.partition_state import PartitionKey
from streamplane.core.commitlog import PartitionProgress
from streamplane.exceptions import KafkaError

log = logging.getLogger(__name__)


class ClusterCommits(Protocol):
    """Commits to one cluster (``CommitStore``): (topic, partition, progress) each."""

    def commit(self, items: Sequence[tuple[str, int, PartitionProgress]]) -> object: ...


CLUSTER_WAIT_S = 5.0


class Committer:
    def __init__(
        self,
        stores: Mapping[str, ClusterCommits],
        name: str,
        cluster_wait_s: float = CLUSTER_WAIT_S,
        committable: Callable[[], Container[PartitionKey] | None] = lambda: None,
    ) -> None:
        """``stores``: by cluster, where to commit (looked up when a commit runs, so
        clusters added later are found). ``committable``: the partitions that may be
        committed now (None: every one)."""
        self._stores = stores
        self._committable = committable
        self._name = name
        self._cluster_wait_s = cluster_wait_s
        self._stuck: dict[str, threading.Thread] = {}  # commits still running, by cluster
        self._cond = threading.Condition()
        self._pending: dict[PartitionKey, PartitionProgress] = {}
        self._submitted = 0  # tickets handed out
        self._done = 0  # every ticket up to this one is committed (or failed)
        self._stopping = False
        self._thread: threading.Thread | None = None
        # Partitions whose commit failed: appended here, drained by the consumer.
        self.failed: list[PartitionKey] = []

    def submit(self, items: Sequence[tuple[PartitionKey, PartitionProgress]], wait: bool) -> None:
        """Commit these snapshots in the background; with ``wait``, return once they
        and everything submitted before them are committed or have failed."""
        with self._cond:
            if self._stopping:
                raise KafkaError("the committer is stopped")
            self._pending.update(items)
            self._submitted += 1
            ticket = self._submitted
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
            while wait and self._done < ticket:
                self._cond.wait()

    def take_failed(self) -> list[PartitionKey]:
        """The partitions whose commit failed since the last call."""
        failed = self.failed
        n = len(failed)
        out = failed[:n]
        del failed[:n]  # one step each under the GIL: a failure appended meanwhile is kept
        return out

    def stop(self) -> None:
        """Finish what was submitted, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._done == self._submitted and not self._stopping:
                    self._cond.wait()
                if self._done == self._submitted:
                    return  # stopping, and nothing is left
                batch, self._pending = self._pending, {}
                ticket = self._submitted
            try:
                self._commit(batch)
            finally:
                with self._cond:
                    self._done = ticket
                    self._cond.notify_all()

    def _commit(self, batch: dict[PartitionKey, PartitionProgress]) -> None:
        committable = self._committable()
        by_cluster: dict[str, list[PartitionKey]] = {}
        for key in batch:
            if committable is not None and key not in committable:
                self.failed.append(key)  # fenced: committed again only if still ours
                continue
            by_cluster.setdefault(key.cluster, []).append(key)
        for cluster, keys in by_cluster.items():
            stuck = self._stuck.get(cluster)
            if stuck is not None:
                if stuck.is_alive():
                    self.failed += keys
                    continue
                del self._stuck[cluster]
            items = [(k.topic, k.partition, batch[k]) for k in keys]
            ok: list[bool] = []
            worker = threading.Thread(
                target=self._commit_to,
                args=(cluster, items, ok),
                name=f"{self._name}-{cluster}",
                daemon=True,
            )
            worker.start()
            worker.join(self._cluster_wait_s)
            if worker.is_alive():
                log.warning(
                    "commit to %s has not returned in %.0f s (no coordinator answers?): "
                    "its partitions are committed again later, the other clusters' meanwhile",
                    cluster,
                    self._cluster_wait_s,
                )
                self._stuck[cluster] = worker
            if not ok:
                self.failed += keys

    def _commit_to(
        self, cluster: str, items: list[tuple[str, int, PartitionProgress]], ok: list[bool]
    ) -> None:
        try:
            self._stores[cluster].commit(items)
            ok.append(True)
        except KafkaError as exc:
            log.warning("commit to %s failed (%s): will retry", cluster, exc)
        except Exception:  # a bug must not end the committer: the state is kept
            log.exception("commit to %s failed: will retry", cluster)

    def busy(self) -> dict[str, threading.Thread]:
        """Clusters whose commit is still running past its wait (their client is in
        use until the thread ends)."""
        return {c: t for c, t in list(self._stuck.items()) if t.is_alive()}
