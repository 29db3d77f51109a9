"""Where an ops command finds its cluster: --bootstrap, or --cluster through the
control plane."""

from __future__ import annotations

import pytest

from streamplane.cli.ops import resolve_bootstrap
from streamplane.exceptions import ControlPlaneUnavailable
from streamplane.local.control_plane_process import free_port


def test_with_the_control_plane_down_the_error_names_the_way_around_it() -> None:
    """An exploratory run: `--cluster local-a` with the control plane down said only
    that it was unreachable, though the cluster answered and --bootstrap would do."""
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ControlPlaneUnavailable) as err:
        resolve_bootstrap(None, "local-a", url, None)
    assert url in str(err.value)
    assert str(err.value).endswith("to reach local-a without it: --bootstrap HOST:PORT")
    assert resolve_bootstrap("h:1", None, url, None) == "h:1"  # never asked
