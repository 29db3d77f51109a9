"""`streams create --lanes` refuses an empty lane name, and `clusters update
--remove-tag` says when the tag was not set (both used to pass without a word)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from click.testing import CliRunner

from streamplane.cli import clusters as clusters_cli
from streamplane.cli import streams as streams_cli
from streamplane.cli.main import cli


@dataclass
class FakeControlPlane:
    """The client calls the commands make, against one registered cluster."""

    tags: dict[str, str] = field(default_factory=lambda: {"env": "prod", "zone": "a"})
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def _doc(self) -> dict[str, Any]:
        return {"name": "kafka-1", "bootstrap": "h:9092", "tags": dict(self.tags)}

    def get_cluster(self, name: str) -> dict[str, Any]:
        return self._doc()

    def update_cluster(
        self, name: str, bootstrap: str | None, tags: dict[str, str] | None, force: bool = False
    ) -> dict[str, Any]:
        self.calls.append(("update_cluster", tags))
        if tags is not None:
            self.tags = dict(tags)
        return self._doc()

    def create_stream(self, name: str, cluster: str, **kwargs: Any) -> Any:
        self.calls.append(("create_stream", kwargs["lanes"]))
        raise AssertionError("not expected to be called")


@pytest.fixture
def control_plane(monkeypatch: pytest.MonkeyPatch) -> FakeControlPlane:
    fake = FakeControlPlane()

    @contextmanager
    def connect(url: str, token: str | None) -> Iterator[FakeControlPlane]:
        yield fake

    monkeypatch.setattr(clusters_cli, "connect", connect)
    monkeypatch.setattr(streams_cli, "connect", connect)
    return fake


@pytest.mark.parametrize("lanes", ["a,,b", "a,b,", ",a", "a, ,b"])
def test_an_empty_lane_name_is_refused(control_plane: FakeControlPlane, lanes: str) -> None:
    result = CliRunner().invoke(
        cli, ["streams", "create", "orders", "--cluster", "c", "--lanes", lanes]
    )
    assert result.exit_code == 2, result.output
    assert "--lanes" in result.output
    assert "empty lane name" in result.output
    assert control_plane.calls == []  # nothing sent


def test_lanes_are_read_in_order_spaces_ignored() -> None:
    assert streams_cli._lanes(" realtime , bulk") == ("realtime", "bulk")
    assert streams_cli._lanes("solo") == ("solo",)


def test_no_lane_at_all_is_refused(control_plane: FakeControlPlane) -> None:
    result = CliRunner().invoke(
        cli, ["streams", "create", "orders", "--cluster", "c", "--lanes", ""]
    )
    assert result.exit_code == 2, result.output
    assert "give at least one lane" in result.output


def test_removing_a_tag_that_is_not_set_says_so(control_plane: FakeControlPlane) -> None:
    result = CliRunner().invoke(cli, ["clusters", "update", "kafka-1", "--remove-tag", "nope"])
    assert result.exit_code == 0, result.output
    assert "warning: cluster kafka-1 has no tag nope: nothing removed" in result.output
    assert control_plane.calls == []  # nothing changed: nothing saved (nor audited)
    assert "unchanged: kafka-1" in result.output


def test_the_other_changes_are_made_and_only_the_missing_tag_is_named(
    control_plane: FakeControlPlane,
) -> None:
    result = CliRunner().invoke(
        cli,
        ["clusters", "update", "kafka-1", "--remove-tag", "zone", "--remove-tag", "nope"],
    )
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: cluster kafka-1 has no tag nope: nothing removed"]
    assert control_plane.calls == [("update_cluster", {"env": "prod"})]
    assert "updated kafka-1" in result.output


def test_unset_tags() -> None:
    current = {"env": "prod"}
    assert clusters_cli.unset_tags(current, {}, ["env"]) == []
    assert clusters_cli.unset_tags(current, {"new": "x"}, ["new"]) == []  # set by --tag
    assert clusters_cli.unset_tags(current, {}, ["b", "a", "b"]) == ["b", "a"]
