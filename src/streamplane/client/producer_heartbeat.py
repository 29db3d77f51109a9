"""A producer's heartbeat: "I write with routing epoch N", about once a second.

The control plane seals a draining segment once every live producer of the stream
reports an epoch at or above the failover that drained it (or after a grace period), so
a producer reports its epoch on a timer and right after it switches (``beat_now``). A
daemon thread sends it; errors never reach the producer: with the control plane away
the producer keeps writing (fail-static) and the heartbeat resumes when it returns.
Without a token (401) at start the heartbeat stops after one warning; the control
plane then relies on its grace period for this producer. A heartbeat refused later (the
token was rotated on the control plane) is warned about once and sent on: it counts
again once the token is accepted. ``leave`` (at the producer's close)
deregisters it. A wrong token (403) is a mistake to fix,
not a mode: the first heartbeat is sent by ``start``, which raises ``Unauthorized``
(``generate --token wrong`` used to print a warning and produce every record anyway,
exit 0, unseen by the sealer).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.exceptions import ControlPlaneError, ControlPlaneUnavailable, Unauthorized

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 1.0
# How long ``leave`` waits for a beat in flight, and for the control plane's answer.
_LEAVE_TIMEOUT_S = 2.0


def new_producer_id() -> str:
    host = "".join(c if c.isalnum() or c in "._-" else "-" for c in socket.gethostname())
    return f"{host[:60]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class ProducerHeartbeat:
    def __init__(
        self,
        client: ControlPlaneClient,
        stream: str,
        epoch: Callable[[], int],
        producer_id: str | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> None:
        self._client = client
        self._stream = stream
        self._epoch = epoch
        self.producer_id = producer_id or new_producer_id()
        self._interval_s = interval_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.last_epoch_sent: int | None = None
        self._refusing = False  # a heartbeat was refused (wrong token), until one is not

    def start(self) -> None:
        """Send the first heartbeat, then beat from a daemon thread. Raises
        ``Unauthorized`` if the token is wrong (403); without a token (401) it warns and
        does not beat; with the control plane away it beats again later (fail-static)."""
        if self._thread is not None:
            return
        try:
            self._beat()
        except Unauthorized as exc:
            if exc.status != 401:
                raise
            log.warning("producer heartbeat for %s refused, not sent: %s", self._stream, exc)
            return
        except ControlPlaneError as exc:
            self._failed(exc)
        self._thread = threading.Thread(
            target=self._run, name=f"producer-heartbeat-{self._stream}", daemon=True
        )
        self._thread.start()

    def beat_now(self) -> None:
        """Send a heartbeat right away (after a routing switch)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def leave(self) -> None:
        """Stop, and tell the control plane this producer is gone (it counted as live
        for ``producer_liveness`` after its last heartbeat, holding up the sealing of a
        segment it would never write to again). Best effort: with the control plane
        away, or the heartbeat refused, the producer simply stops beating."""
        self.stop()
        thread, self._thread = self._thread, None
        if thread is None:  # never started, or refused: never counted as live
            return
        thread.join(_LEAVE_TIMEOUT_S)  # a beat in flight would count it live again
        try:
            self._client.producer_left(self._stream, self.producer_id, timeout=_LEAVE_TIMEOUT_S)
        except ControlPlaneError as exc:
            log.debug("telling the control plane producer %s left failed: %s",
                      self.producer_id, exc)  # fmt: skip

    def _beat(self) -> None:
        epoch = self._epoch()
        self._client.producer_heartbeat(self._stream, self.producer_id, epoch)
        self.sent += 1
        self.last_epoch_sent = epoch

    def _failed(self, exc: ControlPlaneError) -> None:
        if not isinstance(exc, ControlPlaneUnavailable):  # away: fail-static, beat later
            log.debug("producer heartbeat for %s failed: %s", self._stream, exc)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._beat()
            except Unauthorized as exc:
                # The token was changed on the control plane: the sealer no longer
                # counts this producer live (it relies on its grace period). Beating on,
                # it counts again once the token is accepted (the old one restored, or
                # kept as a previous token).
                if not self._refusing:
                    self._refusing = True
                    log.warning(
                        "producer heartbeat for %s refused: %s (was the API token "
                        "rotated? the records are still sent; segments this producer "
                        "wrote to are sealed after their grace period instead)",
                        self._stream, exc,
                    )  # fmt: skip
            except ControlPlaneError as exc:
                self._failed(exc)
            else:
                if self._refusing:
                    self._refusing = False
                    log.info("producer heartbeat for %s accepted again", self._stream)
