"""`streamplane lag` rendering (pure) and the command over a stub transport."""

from __future__ import annotations

from unittest import mock

from click.testing import CliRunner

from streamplane.cli.lag import lag, render, seconds
from tests.module_time import ModuleTime

DOC = {
    "now_ms": 1,
    "monitor": True,
    "groups": [
        {
            "group": "indexer",
            "clusters": ["local-a", "local-b"],
            "streams": ["logs"],
            "partitions": 2,
            "offset_lag": 12,
            "max_time_lag_s": 3.25,
            "unknown_time_lag": 0,
            "status": "WARN",
            "last_commit_ms": 1,
        }
    ],
    "partitions": [
        {
            "group": "indexer",
            "cluster": "local-a",
            "stream": "logs",
            "lane": "realtime",
            "topic": "sp.logs.realtime.e1",
            "partition": 0,
            "committed_offset": 5,
            "end_offset": 17,
            "offset_lag": 12,
            "time_lag_s": 3.25,
            "status": "WARN",
            "last_commit_ms": 1,
        }
    ],
}


def test_groups_table() -> None:
    out = render(DOC, None)
    assert out.splitlines()[0].split() == [
        "GROUP", "STREAMS", "CLUSTERS", "PARTITIONS", "OFFSET", "LAG", "TIME", "LAG", "STATUS",
    ]  # fmt: skip
    assert "indexer  logs" in out and "3.2s" in out and "WARN" in out


def test_partition_table_with_total() -> None:
    out = render(DOC, "indexer")
    assert "sp.logs.realtime.e1" in out and "local-a" in out
    assert out.endswith("group indexer: offset lag 12, time lag 3.2s, WARN")


def test_empty_and_off() -> None:
    assert render({"monitor": True, "groups": [], "partitions": []}, None).startswith("no ")
    assert "off" in render({"monitor": False, "groups": [], "partitions": []}, None)


def test_seconds() -> None:
    assert [seconds(v) for v in (None, 0.04, 90, 7200)] == ["-", "0.0s", "1.5m", "2.0h"]


def test_watch_keeps_trying_while_the_control_plane_is_away() -> None:
    """`lag --watch` rides through a control-plane restart (it used to exit at the first
    failed redraw); without --watch the error ends the command."""
    nowhere = ["--url", "http://127.0.0.1:1"]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    with mock.patch("streamplane.cli.lag.time", ModuleTime(sleep)):
        out = CliRunner().invoke(lag, [*nowhere, "--watch", "--interval", "0.5"])
    assert out.exit_code == 0, out.output
    assert out.output.count("trying again every 0.5s") == 2
    once = CliRunner().invoke(lag, nowhere)
    assert once.exit_code != 0 and "unreachable" in str(once.exception or once.output)


def test_an_empty_group_or_stream_is_a_usage_error() -> None:
    """`lag -g ''` used to list every group's partitions (the client drops an empty
    filter) under a summary naming one group, exit code 0; the API answers 422."""
    for args in (["-g", ""], ["--group="], ["-s", ""], ["-g", "indexer", "--stream="]):
        with mock.patch("streamplane.cli.lag.connect") as connect:
            # What the client sent for it: no filter, so every group's partitions.
            connect.return_value.__enter__.return_value.lag.return_value = DOC
            result = CliRunner().invoke(lag, args)
        assert result.exit_code == 2, (args, result.output)
        errors = [line for line in result.output.splitlines() if line.startswith("Error")]
        assert len(errors) == 1 and "must not be empty" in errors[0], result.output
        connect.assert_not_called()


def test_unknown_partitions_are_shown_beside_a_groups_lag() -> None:
    doc = {
        **DOC,
        "groups": [
            {
                **DOC["groups"][0],  # type: ignore[index]
                "offset_lag": 0,
                "max_time_lag_s": 0.0,
                "unknown_offset_lag": 4,
                "unknown_time_lag": 4,
            }
        ],
    }
    assert "0 (4 unknown)" in render(doc, None) and "0.0s (4 unknown)" in render(doc, None)
    assert render(doc, "indexer").endswith(
        "group indexer: offset lag 0 (4 unknown), time lag 0.0s (4 unknown), WARN"
    )
    # A control plane without the field (older): as before.
    assert render(DOC, "indexer").endswith("group indexer: offset lag 12, time lag 3.2s, WARN")
