"""`streamplane groups list|describe`: a group as the Assigner holds it, over the API.

An operator had no command to see a group: who is in it, their load, which units each
holds, which are being handed over and to whom, which no member holds. The API could
describe one group (``GET /v1/groups/{group}/members``) but not list them, and said
nothing of pending releases or unowned units.
"""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from streamplane.cli import groups as groups_cli
from streamplane.controlplane.assigner import AssignerService
from streamplane.core.assignment import AssignerConfig, MemberLoad
from streamplane.core.routing import new_routing_table
from tests.unit.controlplane.conftest import AUTH, CliRun, cli_over, create_stream

UNIT = "local-a/sp.orders.realtime.e1/{}"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_describe_names_pending_releases_with_their_target_and_unowned_units() -> None:
    clock = Clock()
    table = new_routing_table("orders", ["realtime"], "local-a", 4)
    assigner = AssignerService(
        lambda _s: table, AssignerConfig(lease_ttl_s=1.5), clock=clock, recovery_s=0.0
    )
    assigner.heartbeat("g", "orders", ["realtime"], "a", MemberLoad(cpu=0.5, records_per_s=40))
    assigner.heartbeat("g", "orders", ["realtime"], "b", MemberLoad())  # a gives b half
    clock.now += 0.5
    doc = assigner.describe("g")
    assert doc["units"] == 4 and doc["unowned"] == []
    members = doc["members"]
    assert isinstance(members, list)
    a, b = members
    assert (a["member_id"], a["cpu"], a["records_per_s"], a["lease_s"]) == ("a", 0.5, 40, 1.0)
    assert len(a["units"]) == len(a["releasing"]) == 2 and b["units"] == []
    assert doc["pending_release"] == [
        {"unit": u, "holder": "a", "target": "b", "deadline_s": 1.0} for u in a["releasing"]
    ]
    clock.now += 5  # both leases run out: every unit is unowned
    [gone] = assigner.describe_all()
    assert gone["members"] == [] and gone["pending_release"] == []
    assert gone["unowned"] == [UNIT.format(p) for p in range(4)]


@pytest.fixture
def group(app: FastAPI, http: TestClient) -> TestClient:
    """Group g on stream orders (4 partitions of realtime, 4 of bulk): member m1 holds
    every unit, then m2 joins and m1 is told to release half of them to it."""
    create_stream(http, partitions=4)
    app.state.assigner._recover_until = 0.0  # its start-up window over
    body = {"stream": "orders", "lanes": ["realtime", "bulk"]}
    for member, cpu in (("m1", 0.25), ("m2", 0.0)):
        resp = http.post(
            "/v1/groups/g/heartbeat",
            json={**body, "member_id": member, "cpu": cpu, "records_per_s": 120.0},
            headers=AUTH,
        )
        assert resp.status_code == 200, resp.text
    return http


def test_the_api_lists_the_assigners_groups(group: TestClient) -> None:
    [row] = group.get("/v1/assigner/groups").json()
    assert row == {
        "group": "g",
        "stream": "orders",
        "lanes": ["realtime", "bulk"],
        "members": 2,
        "units": 8,
        "unowned": 0,
        "generation": row["generation"],
        "recovering": False,
    }
    described = group.get("/v1/groups/g/members").json()
    assert {p["holder"] for p in described["pending_release"]} == {"m1"}
    assert {p["target"] for p in described["pending_release"]} == {"m2"}
    assert described["unowned"] == []


def test_an_unknown_group_is_a_404_naming_the_known_ones(group: TestClient) -> None:
    resp = group.get("/v1/groups/nope/members")
    assert resp.status_code == 404
    assert resp.json()["detail"] == (
        "unknown group 'nope': no member of it has heartbeated to the Assigner (known: g)"
    )


def test_the_openapi_document_describes_the_group_routes(http: TestClient) -> None:
    doc = http.get("/openapi.json").json()
    listed = doc["paths"]["/v1/assigner/groups"]["get"]["responses"]["200"]
    assert listed["content"]["application/json"]["schema"]["items"]["$ref"].endswith(
        "/GroupSummaryOut"
    )
    fields = doc["components"]["schemas"]["GroupOut"]["properties"]
    assert {"members", "pending_release", "unowned", "units", "generation"} <= set(fields)


# ---------------------------------------------------------------------- the CLI
@pytest.fixture
def run(
    group: TestClient, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> CliRun:
    return cli_over(group, monkeypatch, capsys, groups_cli)


def test_groups_list(run: CliRun) -> None:
    code, out, _ = run("groups", "list")
    assert code == 0
    header, _, row = out.splitlines()
    assert header.split() == [
        "group", "stream", "lanes", "members", "units", "unowned", "generation",
    ]  # fmt: skip
    assert row.split()[:6] == ["g", "orders", "realtime,bulk", "2", "8", "0"]
    code, out, _ = run("groups", "list", "--json")
    assert code == 0 and [g["group"] for g in json.loads(out)] == ["g"]


def test_groups_describe(run: CliRun) -> None:
    code, out, _ = run("groups", "describe", "g")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[1] == "stream      orders (lanes realtime > bulk)"
    assert lines[3] == "units       8 (0 unowned, 4 pending release)"
    members = {line.split()[0]: line.split() for line in lines if line.startswith("m")}
    # member, cpu, records/s, lease left, units, releasing, holds...
    assert members["m1"][1:3] == ["25%", "120.0"] and members["m1"][5] == "4"
    assert members["m2"][1:3] == ["0%", "120.0"] and members["m2"][4:] == ["0", "0", "-"]
    assert members["m1"][4] == "4" and members["m1"][6].startswith("local-a/sp.orders.")
    assert "pending release (the holder stops the unit, then it moves on):" in lines
    pending = [line.split() for line in lines if line.startswith("local-a/")]
    assert len(pending) == 4 and {(p[1], p[2]) for p in pending} == {("m1", "m2")}

    code, out, _ = run("groups", "describe", "g", "--json")
    doc = json.loads(out)
    assert code == 0 and len(doc["pending_release"]) == 4 and doc["unowned"] == []


def test_an_unknown_group_is_one_error_line(run: CliRun) -> None:
    code, out, err = run("groups", "describe", "nope")
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "error: unknown group 'nope': no member of it has heartbeated to the Assigner (known: g)"
    ]


def test_compact_units() -> None:
    units = [UNIT.format(p) for p in (5, 0, 1, 2)] + ["local-b/t/7"]
    assert groups_cli.compact_units(units) == "local-a/sp.orders.realtime.e1 0-2,5; local-b/t 7"
    assert groups_cli.compact_units([]) == "-"
