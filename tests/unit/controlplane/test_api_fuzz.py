"""Fuzz the API from its own OpenAPI document (schemathesis): never a 5xx, always as documented.

The app runs in-process over a temporary SQLite file and the stub Kafka admin, with the
token sent on every request so mutations get past auth. Bounded and deterministic:
25 examples per operation, a fixed seed, no example database.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.service import StreamSpec
from tests.unit.controlplane.conftest import AUTH, BOOTSTRAPS, TOKEN, StubKafka, make_service

if TYPE_CHECKING:  # an alias schemathesis defines for type checkers only
    from schemathesis.specs.openapi.schemas import OpenApiCase

_dir = Path(tempfile.mkdtemp(prefix="sp-fuzz-"))
atexit.register(shutil.rmtree, _dir, ignore_errors=True)
_db = f"sqlite:///{_dir / 'cp.db'}"
_service = make_service(_db, StubKafka())
for _name, _bootstrap in BOOTSTRAPS.items():
    _service.register_cluster(_name, _bootstrap, {"env": "local"})
# A stream that exists, for the operations on one (generated names are unknown: 404).
FUZZED_STREAM = "fuzzed"
_service.create_stream(StreamSpec(FUZZED_STREAM, "local-a", partitions=1))
# A short maximum watch timeout: the schema says so, so no generated watch waits long.
_settings = ControlPlaneSettings(
    db_url=_db, api_token=TOKEN, watch_timeout_max=0.2, lag_monitor=False
)
APP = create_app(_settings, _service)

# A schema-valid request may still break a rule the schema cannot state (the dlq lane is
# implicit, max.message.bytes is managed, an unknown lane of this stream): that is a
# 400 with a one-line message, not a failure.
CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": 20261123,
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "400", "401", "403", "404", "409"]
            }
        },
    }
)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP, config=CONFIG)


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_api_conforms_to_its_schema_and_never_fails(case: OpenApiCase) -> None:
    case.call_and_validate(headers=AUTH)


@schema.include(path="/v1/streams/{name}/lanes", method="POST").parametrize()
@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_adding_lanes_to_a_stream_that_exists_never_fails(case: OpenApiCase) -> None:
    """Bodies past the 404 of an unknown stream: lanes added (201, a dozen in a run),
    names taken (409), places and clusters unknown (400, 404)."""
    case.path_parameters = {"name": FUZZED_STREAM}
    case.call_and_validate(headers=AUTH)
