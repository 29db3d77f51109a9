"""``controlPlane`` and its aliases ``control_plane`` and ``url``: two of them with
different values are refused, naming both (one was ignored without a word)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from streamplane.exceptions import ConfigError
from streamplane.pipeline.options import parse_read_options, parse_write_options

READ = {"stream": "s", "group": "g"}


@pytest.mark.parametrize("parse", [parse_read_options, parse_write_options])
def test_two_names_of_the_control_plane_with_different_values_are_refused(
    parse: Callable[[Mapping[str, str]], object],
) -> None:
    # Spark passes option names lower-cased.
    options = {**READ, "controlplane": "http://cp:8470", "url": "localhost:9092"}
    with pytest.raises(ConfigError) as info:
        parse(options)
    assert str(info.value) == (
        "options 'controlPlane' and 'url' name the control plane with different values "
        "(controlPlane='http://cp:8470', url='localhost:9092'): give one of them (they are "
        "aliases). Kafka's bootstrap servers are no option: the source takes each "
        "cluster's from the control plane"
    )


def test_three_names_are_all_named() -> None:
    options = {**READ, "url": "http://a:1", "control_plane": "http://b:1", "controlPlane": "x"}
    with pytest.raises(ConfigError, match="options 'controlPlane', 'control_plane' and 'url' "):
        parse_read_options(options)


def test_names_that_agree_are_one_control_plane() -> None:
    options = {**READ, "controlPlane": "http://cp:8470", "url": " http://cp:8470 "}
    assert parse_read_options(options).control_plane == "http://cp:8470"
    assert parse_read_options({**READ, "url": "http://cp:1"}).control_plane == "http://cp:1"


def test_a_bad_url_is_quoted_under_the_name_it_was_given() -> None:
    with pytest.raises(ConfigError, match=r"option 'url' must be an http\(s\) URL, got 'cp:1'"):
        parse_read_options({**READ, "url": "cp:1"})
