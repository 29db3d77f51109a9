"""The telemetry job, unchanged, on a real Spark standalone cluster (not ``local[...]``).

Starts a standalone master and one worker from the pip PySpark distribution
(``$SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master`` /
``...worker.Worker``, both on 127.0.0.1, the worker with ``--cores`` and ``--memory``
from the options), a local Kafka cluster and a control plane (bench/_stack.py);
produces ``--events`` generated telemetry events (0.5% malformed) to a new stream;
then runs the CLI exactly as a user would::

    streamplane pipeline telemetry --master spark://127.0.0.1:PORT --stream S \\
        --warehouse W --available-now --url URL --token TOKEN

The executors run in the worker's JVM with their own Python workers (this virtualenv's
interpreter), read Kafka themselves and write the Delta files; the driver is the CLI
process. Afterwards the tables are read back (a local session) and checked against the
generator's ground truth: every valid event stored once, every malformed one
dead-lettered. Prints the job's wall time and the checks; exits non-zero on a mismatch.

    .venv/bin/python bench/spark_cluster.py [--events 20000] [--cores 2] [--memory 2g]

Not part of ``make test``: a master, a worker and an executor JVM on top of the test
fleet would not fit the 2-core machine's test budget (see docs/pipeline.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark

from _stack import local_stack
from streamplane.client.producer import StreamProducer
from streamplane.local.control_plane_process import free_port
from streamplane.pipeline.generator import generate, produce

SPARK_HOME = Path(pyspark.__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent


def wait_for_line(log: Path, needle: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and needle in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited ({proc.returncode}); see {log}")
        time.sleep(0.3)
    raise RuntimeError(f"no {needle!r} in {log} after {timeout_s:.0f}s")


@contextmanager
def standalone_cluster(workdir: Path, cores: int, memory: str) -> Iterator[str]:
    """A standalone master and one worker on loopback; yields the master URL."""
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(workdir / "logs"),
        "SPARK_WORKER_DIR": str(workdir / "work"),
    }
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master_log = workdir / "master.log"
    worker_log = workdir / "worker.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with master_log.open("wb") as out:
            master = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(free_port())],
                env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        procs.append(master)
        wait_for_line(master_log, "I have been elected leader", master, 120)
        with worker_log.open("wb") as out:
            worker = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                 "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                 "--work-dir", str(workdir / "work")],
                env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        procs.append(worker)
        wait_for_line(worker_log, "Successfully registered with master", worker, 120)
        yield url
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--memory", default="2g")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-spark-cluster-"))
    warehouse = workdir / "warehouse"
    with (
        local_stack(clusters=1) as stack,
        standalone_cluster(workdir, args.cores, args.memory) as url,
    ):
        print(f"standalone cluster up: {url} (worker: {args.cores} cores, {args.memory})")
        stream = "cluster-telemetry"
        stack.client.create_stream(stream, "local-a", partitions=3)
        with StreamProducer(stream, stack.client) as producer:
            truth = produce(
                producer, generate(args.events, seed=7, poison_ratio=0.005, rate=5_000), rate=1e9
            )
        print(f"produced {truth.produced} events ({len(truth.poison_keys)} malformed)")
        started = time.monotonic()
        run = subprocess.run(
            [str(VENV_BIN / "streamplane"), "pipeline", "telemetry", "--master", url,
             "--stream", stream, "--warehouse", str(warehouse), "--available-now",
             "--url", stack.control_plane.url, "--token", stack.control_plane.token],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        elapsed = time.monotonic() - started
        print(run.stdout.strip())
        if run.returncode != 0:
            print(run.stderr[-4000:], file=sys.stderr)
            print(f"telemetry job on {url} failed ({run.returncode})")
            return 1
        print(f"telemetry job on {url}: {elapsed:.1f} s wall (JVM start included)")
        apps = sorted((workdir / "work").glob("app-*"))
        print(f"applications run by the worker: {[a.name for a in apps]}")

    from streamplane.pipeline.spark import build_session

    spark = build_session("bench-spark-cluster-check", master="local[1]")
    try:
        events = spark.read.format("delta").load(str(warehouse / "events"))
        stored = {r["event_id"] for r in events.select("event_id").collect()}
        dead = spark.read.format("delta").load(str(warehouse / "dead_letters"))
        dead_keys = {bytes(r["key"]).decode() for r in dead.select("key").collect()}
        count = events.count()
    finally:
        spark.stop()
    valid = {e.event_id for e in truth.events}
    ok = count == len(stored) and stored == valid and dead_keys == set(truth.poison_keys)
    print(
        f"check: {count} stored rows, {len(stored)} distinct ids, {len(valid)} valid sent; "
        f"{len(dead_keys)} dead letters, {len(truth.poison_keys)} malformed sent: "
        f"{'OK' if ok else 'MISMATCH'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
