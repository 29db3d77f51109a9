"""The dashboard in headless Chromium: from a stream to its group, the lag chart has data.

Needs Debian's chromium (``infra/chromium/ensure-chromium.sh``); without it the test
fails and says so, it does not skip. The screenshot is saved in the test's tmp dir.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx

from streamplane.client.producer import StreamProducer
from streamplane.core.commitlog import PartitionProgress, encode
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor
from tests.integration.lag.cdp import Browser, chromium_path
from tests.integration.lag.conftest import commit, unique, wait_for


def test_click_from_a_stream_to_its_group_shows_the_lag_chart(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    chromium_path()  # fail first, and clearly, when the browser is missing
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    topic = f"sp.{stream}.realtime.e1"
    with control_plane.client() as client, StreamProducer(stream, client) as producer:
        for i in range(20):
            producer.send(b"hello", key=str(i).encode())
    group = unique("dash")
    now = int(time.time() * 1000)
    progress = PartitionProgress(
        low_watermark=5, commit_time_ms=now, low_watermark_timestamp_ms=now - 20_000
    )
    commit(fleet.bootstrap("local-a"), group, topic, 0, 5, encode(progress).metadata)

    def history_has_data() -> bool:
        resp = httpx.get(f"{control_plane.url}/v1/groups/{group}/lag/history", timeout=5)
        return resp.status_code == 200 and bool(resp.json()["series"])

    wait_for("lag history of the group", history_has_data, 20)

    browser = Browser(tmp_path / "profile")
    try:
        browser.open(f"{control_plane.url}/ui#/streams/{stream}")
        link = f'a.group-link[data-group="{group}"]'
        browser.wait_for(f"!!document.querySelector('{link}')", "the group link on the stream")
        assert browser.evaluate("document.querySelector('#view').dataset.view") == "streams"
        browser.click(link)
        points = browser.wait_for(
            "(() => { const p = document.querySelector('#lag-chart path.series');"
            " return p ? Number(p.dataset.points) : 0; })()",
            "the lag chart with data",
        )
        assert points >= 2
        assert browser.evaluate("location.hash") == f"#/groups/{group}"
        assert browser.evaluate("document.querySelector('#view').dataset.view") == "groups"
        assert browser.evaluate("document.querySelector('#view').innerText.includes('sp.' )"), (
            "the partitions table lists the stream topic"
        )
        shot = tmp_path / "dashboard-group.png"
        browser.screenshot(shot)
        assert shot.stat().st_size > 5_000
        print(f"\nscreenshot: {shot} ({points} chart points)")
    finally:
        browser.close()
