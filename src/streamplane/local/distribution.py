"""Jars resolved from Maven Central by Maven: the Kafka broker and the Spark connectors.

``MavenClasspath`` is one pom and its cached classpath file. ``infra/kafka/pom.xml``
names the broker (``org.apache.kafka:kafka_2.13``) and its runtime dependencies
(``KafkaDistribution``); ``infra/spark/pom.xml`` names Delta Lake and Spark's built-in
Kafka source (``spark_connectors()``). Maven resolves them into its local repository
and writes the runtime classpath to a file under the cache directory. Resolving is idempotent: when
the classpath file exists and every jar on it is present, nothing runs at all, so a
second run does no network work.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from streamplane.exceptions import LocalFleetError, PrerequisiteMissing

_REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_POM = _REPO_ROOT / "infra" / "kafka" / "pom.xml"
DEFAULT_CACHE_DIR = _REPO_ROOT / ".cache" / "kafka"
SPARK_POM = _REPO_ROOT / "infra" / "spark" / "pom.xml"
SPARK_CACHE_DIR = _REPO_ROOT / ".cache" / "spark"


@dataclass(frozen=True)
class MavenClasspath:
    """A pom whose runtime dependencies Maven resolves, and the cached classpath file.

    ``what`` names the thing being resolved in error messages ("Kafka", "the Spark
    connectors").
    """

    pom: Path
    cache_dir: Path
    what: str = "the pom's dependencies"

    @property
    def classpath_file(self) -> Path:
        return self.cache_dir / "classpath.txt"

    def is_resolved(self) -> bool:
        """True when the classpath file exists, is newer than the pom, and every jar exists."""
        cp = self.classpath_file
        if not cp.is_file() or not self.pom.is_file():
            return False
        if cp.stat().st_mtime < self.pom.stat().st_mtime:
            return False
        entries = _split_classpath(cp.read_text())
        return bool(entries) and all(Path(e).is_file() for e in entries)

    def resolve(self, *, quiet: bool = True) -> Path:
        """Resolve the jars with Maven (only if needed); return the classpath file."""
        if self.is_resolved():
            return self.classpath_file
        if not self.pom.is_file():
            raise LocalFleetError(f"{_capitalised(self.what)} pom not found at {self.pom}")
        mvn = shutil.which("mvn")
        if mvn is None:
            raise PrerequisiteMissing(
                f"Maven (mvn) is not on PATH: install Maven 3 to resolve {self.what}"
            )
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.classpath_file.with_suffix(".tmp")
        cmd = [
            mvn,
            "-B",
            *(["-q"] if quiet else []),
            "-f",
            str(self.pom),
            "dependency:build-classpath",
            f"-Dmdep.outputFile={tmp}",
            "-Dmdep.includeScope=runtime",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            raise LocalFleetError(f"Maven could not resolve {self.what}: " + " | ".join(tail))
        tmp.replace(self.classpath_file)
        return self.classpath_file

    def classpath(self) -> str:
        """The runtime classpath, resolving first if needed."""
        return self.resolve().read_text().strip()

    def jars(self) -> list[Path]:
        """The runtime classpath as a list of jar paths, resolving first if needed."""
        return [Path(e) for e in _split_classpath(self.classpath())]


@dataclass(frozen=True)
class KafkaDistribution(MavenClasspath):
    """Where the broker's jars are described (pom) and where the classpath is cached."""

    pom: Path = DEFAULT_POM
    cache_dir: Path = DEFAULT_CACHE_DIR
    what: str = "Kafka"

    def version(self) -> str:
        """The Kafka version named by the resolved classpath (e.g. ``4.4.0``)."""
        for entry in _split_classpath(self.classpath()):
            name = Path(entry).name
            if name.startswith("kafka_2.13-") and name.endswith(".jar"):
                return name[len("kafka_2.13-") : -len(".jar")]
        raise LocalFleetError("kafka_2.13 jar not on the resolved classpath")


def spark_connectors() -> MavenClasspath:
    """Delta Lake and Spark's built-in Kafka source (``infra/spark/pom.xml``)."""
    return MavenClasspath(SPARK_POM, SPARK_CACHE_DIR, "the Spark connectors")


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def _split_classpath(text: str) -> list[str]:
    return [e for e in text.strip().split(":") if e]


def require_java() -> str:
    """Path of ``java``; raises PrerequisiteMissing with a one-line message if absent."""
    java = shutil.which("java")
    if java is None:
        raise PrerequisiteMissing("Java is not on PATH: Kafka 4 needs Java 17 or newer")
    return java
