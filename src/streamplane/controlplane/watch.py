"""The watch hub behind ``GET /v1/streams/{name}/routing?after_epoch=N``: long polls.

A waiter is one asyncio future (no thread per waiter), registered with the epoch its
caller has already seen. It is woken when

- this replica publishes a change of that stream (``publish``, callable from any
  thread: the service runs in worker threads), or
- the poller, one task for all waiters, sees in the store that the stream's epoch
  moved past the waiter's (a change made by another replica) or that the stream is
  gone; it reads the epochs of every watched stream in one query every
  ``poll_interval`` seconds, and only while someone waits (a poll that fails is
  tried again; a database outage is left to the store's one warning, any other
  failure is logged once, in one line, until a poll succeeds), or
- the timeout passes, or the hub closes (server shutdown: answer now, don't hang).

The hub only wakes; the HTTP handler then reads the current table and answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection

from fastapi.concurrency import run_in_threadpool

from streamplane.controlplane.store import error_line, is_outage

log = logging.getLogger(__name__)

EpochReader = Callable[[Collection[str]], dict[str, int]]


class WatchHub:
    def __init__(self, read_epochs: EpochReader, poll_interval: float = 0.5) -> None:
        self._read_epochs = read_epochs
        self._poll_interval = poll_interval
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poller: asyncio.Task[None] | None = None
        # stream -> {future: the epoch its waiter has seen}
        self._waiters: dict[str, dict[asyncio.Future[None], int]] = {}
        self._closed = False
        self._failing: str | None = None  # the poll's last error, while it fails

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    async def wait(self, stream: str, seen_epoch: int, timeout: float) -> None:
        """Return when ``stream`` has an epoch above ``seen_epoch``, is deleted, or on timeout."""
        if self._closed or timeout <= 0:
            return
        self._bind()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(stream, {})[fut] = seen_epoch
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await fut
        finally:
            waiters = self._waiters.get(stream)
            if waiters is not None:
                waiters.pop(fut, None)
                if not waiters:
                    del self._waiters[stream]

    def publish(self, stream: str, epoch: int | None) -> None:
        """A stream changed (``epoch`` None: deleted). Safe to call from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return  # nobody has waited yet
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake(stream, epoch)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._wake, stream, epoch)

    def close(self) -> None:
        """Release every waiter now (they answer with the current table); stop polling."""
        self._closed = True
        for waiters in list(self._waiters.values()):
            for fut in list(waiters):
                if not fut.done():
                    fut.set_result(None)
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None

    def close_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.close)

    # ------------------------------------------------------------------ internals
    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop
            self._poller = None
        if self._poller is None or self._poller.done():
            self._poller = loop.create_task(self._poll(), name="routing-watch-poller")

    def _wake(self, stream: str, epoch: int | None) -> None:
        for fut, seen in list(self._waiters.get(stream, {}).items()):
            if not fut.done() and (epoch is None or epoch > seen):
                fut.set_result(None)

    async def _poll(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._poll_interval)
            names = [s for s, w in self._waiters.items() if w]
            if not names:
                continue
            try:
                epochs = await run_in_threadpool(self._read_epochs, names)
            except Exception as exc:  # keep waiting, try again
                # A database outage is logged once by the store; anything else once per
                # run of failures, in one line (not every poll_interval).
                line = error_line(exc)
                if not is_outage(exc) and line != self._failing:
                    log.warning("routing watch poll failed: %s", line)
                self._failing = line
                continue
            self._failing = None
            for name in names:
                self._wake(name, epochs.get(name))
