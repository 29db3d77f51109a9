"""Time from `streamplane local up --clusters 2` to all brokers healthy, and broker peak RSS.

Runs the real CLI several times (the machine is noisy: the median counts) and prints
the median start-up time against the 30 s target, and each broker's peak RSS (VmHWM)
after a small produce/consume round trip.

    .venv/bin/python bench/fleet_startup.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streamplane.local.fleet import LocalFleet
from streamplane.local.smoke import round_trip

TARGET_S = 30.0


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    cli = str(Path(sys.executable).parent / "streamplane")
    times: list[float] = []
    rss: list[tuple[str, int, float]] = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            started = time.monotonic()
            subprocess.run(
                [cli, "local", "up", "--clusters", "2", "--data-dir", tmp],
                check=True,
                capture_output=True,
            )
            elapsed = time.monotonic() - started
            times.append(elapsed)
            fleet = LocalFleet(Path(tmp))
            desc = fleet.descriptor()
            for c in desc.clusters.values():
                round_trip(c.name, c.bootstrap, records=5000)
            if run == args.runs - 1:
                for c in desc.clusters.values():
                    for b in c.brokers:
                        assert b.pid is not None
                        rss.append((c.name, b.node_id, peak_rss_mib(b.pid)))
            subprocess.run([cli, "local", "down", "--purge", "--data-dir", tmp], check=True)
            print(f"run {run + 1}: {elapsed:.1f}s to all brokers healthy", flush=True)
    median = statistics.median(times)
    print()
    print(
        f"local up --clusters 2: median {median:.1f}s over {len(times)} runs "
        f"(min {min(times):.1f}s, max {max(times):.1f}s)"
    )
    print(
        f"target {TARGET_S:.0f}s: ratio median/target = {median / TARGET_S:.2f} "
        f"({'meets' if median < TARGET_S else 'misses'} the target)"
    )
    for name, node, mib in rss:
        print(f"peak RSS {name} broker {node}: {mib:.0f} MiB (after 5,000-record round trip)")


if __name__ == "__main__":
    main()
