"""The README's Python example runs as written against the real fleet (only the control
plane's address, its token, the stream's name and the run's length are this test's)."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from pathlib import Path

from streamplane.local.control_plane_process import ControlPlaneProcess

README = Path(__file__).resolve().parents[3] / "README.md"


def readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    (example,) = [b for b in blocks if "StreamConsumer(" in b and "StreamProducer(" in b]
    return str(example)


def test_the_readme_example_runs_as_written(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    stream = stream_factory("local-a", partitions=1)
    code = readme_example()
    for old, new in (
        ('"http://127.0.0.1:8470"', repr(control_plane.url)),
        ('open(".streamplane/api-token").read().strip()', repr(control_plane.token)),
        ('"logs-intake"', repr(stream)),
        ("threading.Timer(10.0,", "threading.Timer(3.0,"),
    ):
        assert old in code, f"the README example no longer has {old}"
        code = code.replace(old, new)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    assert out.getvalue() == "realtime 0 hello\n"
