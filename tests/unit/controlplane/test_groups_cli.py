"""`streamplane groups list|describe`: a group as the Assigner holds it, over the API.

An operator had no command to see a group: who is in it, their load, which units each
holds, which are being handed over and to whom, which no member holds. The API could
describe one group (``GET /v1/groups/{group}/members``) but not list them, and said
nothing of pending releases or unowned units.
"""

from __future__ import annotations

import json
import time

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from streamplane.cli import groups as groups_cli
from streamplane.controlplane.assigner import AssignerService
from streamplane.core.assignment import AssignerConfig, MemberLoad, WorkUnit
from streamplane.core.routing import RoutingTable, new_routing_table
from streamplane.exceptions import NotFound
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
    # a has release_timeout_s (10 s) from when it was asked to hand them back
    assert doc["pending_release"] == [
        {"unit": u, "holder": "a", "target": "b", "deadline_s": 9.5} for u in a["releasing"]
    ]
    clock.now += 5  # both leases run out: every unit is unowned
    [gone] = assigner.describe_all()
    assert gone["members"] == [] and gone["pending_release"] == []
    assert gone["unowned"] == [UNIT.format(p) for p in range(4)]


def test_describe_in_the_recovery_window_shows_the_members_claims() -> None:
    """After a restart (or a change of leader) the Assigner answers each member with the
    units it claims for a recovery window. ``describe`` showed only ``recovering``: no
    member, no unit, nothing unowned, while the Assigner knew who claims what."""
    clock = Clock()
    table = new_routing_table("orders", ["realtime"], "local-a", 4)
    assigner = AssignerService(
        lambda _s: table, AssignerConfig(lease_ttl_s=1.5), clock=clock, recovery_s=2.0
    )
    units = [WorkUnit("sp.orders.realtime.e1", p, "local-a") for p in range(4)]
    load = MemberLoad(cpu=0.25, records_per_s=80.0)
    assigner.heartbeat("g", "orders", ["realtime"], "a", load, claims=units[:2])
    clock.now += 0.5
    assigner.heartbeat("g", "orders", ["realtime"], "b", MemberLoad(), claims=units[2:3])
    clock.now += 0.3
    doc = assigner.describe("g")
    assert doc["recovering"] is True and doc["recovery_ends_s"] == 1.2
    assert doc["generation"] == 0 and doc["units"] == 4 and doc["pending_release"] == []
    assert doc["members"] == [
        {
            "member_id": "a",
            "units": [UNIT.format(0), UNIT.format(1)],
            "releasing": [],
            "lease_s": 0.7,  # its answer's lease ran from its heartbeat
            "cpu": 0.25,
            "records_per_s": 80.0,
        },
        {
            "member_id": "b",
            "units": [UNIT.format(2)],
            "releasing": [],
            "lease_s": 1.2,
            "cpu": 0.0,
            "records_per_s": 0.0,
        },
    ]
    assert doc["unowned"] == [UNIT.format(3)]  # nobody claims it
    clock.now += 1.5  # the window is over, no heartbeat yet: not rebuilt
    [listed] = assigner.describe_all()
    assert listed["recovering"] is True and listed["recovery_ends_s"] == 0.0
    assigner.heartbeat("g", "orders", ["realtime"], "a", load, claims=units[:2])
    rebuilt = assigner.describe("g")
    assert rebuilt["recovering"] is False and rebuilt["recovery_ends_s"] is None
    assert rebuilt["unowned"] == [] and rebuilt["generation"] != 0


def test_describe_in_the_recovery_window_of_a_deleted_stream() -> None:
    """The stream went away during the window: no unit, the claims as they were."""
    clock = Clock()
    tables = {"orders": new_routing_table("orders", ["realtime"], "local-a", 2)}

    def routing(stream: str) -> RoutingTable:
        if stream not in tables:
            raise NotFound(f"stream {stream!r} not found")
        return tables[stream]

    assigner = AssignerService(
        routing, AssignerConfig(lease_ttl_s=1.5), clock=clock, recovery_s=2.0
    )
    unit = WorkUnit("sp.orders.realtime.e1", 0, "local-a")
    assigner.heartbeat("g", "orders", ["realtime"], "a", MemberLoad(), claims=[unit])
    del tables["orders"]
    [doc] = assigner.describe_all()
    assert (doc["units"], doc["unowned"]) == (0, [])
    members = doc["members"]
    assert isinstance(members, list) and members[0]["units"] == [UNIT.format(0)]


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


@pytest.fixture
def recovering(app: FastAPI, http: TestClient) -> TestClient:
    """Group g on stream orders (4 partitions of realtime, 4 of bulk) in the Assigner's
    recovery window: m1 claims realtime 0-1, m2 claims bulk 3."""
    create_stream(http, partitions=4)
    # In its window for the whole test (the app's Assigner runs on the monotonic clock).
    app.state.assigner._recover_until = time.monotonic() + 3600
    body = {"stream": "orders", "lanes": ["realtime", "bulk"]}

    def unit(lane: str, partition: int) -> dict[str, object]:
        return {"cluster": "local-a", "topic": f"sp.orders.{lane}.e1", "partition": partition}

    claims = {"m1": [unit("realtime", 0), unit("realtime", 1)], "m2": [unit("bulk", 3)]}
    for member, claimed in claims.items():
        resp = http.post(
            "/v1/groups/g/heartbeat",
            json={**body, "member_id": member, "cpu": 0.5, "claims": claimed},
            headers=AUTH,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["work_units"] == claimed  # the window's answer: its claims
    return http


def test_groups_describe_in_the_recovery_window(
    recovering: TestClient, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = cli_over(recovering, monkeypatch, capsys, groups_cli)
    code, out, _ = run("groups", "describe", "g")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[2] == "generation  0"
    assert lines[3] == "units       8 (5 unclaimed)"
    assert lines[4].startswith("recovering: the Assigner has just started (or become the leader)")
    assert "members heard so far, with the units each claims:" in lines
    header = next(line for line in lines if line.startswith("member "))
    assert header.split() == ["member", "cpu", "records/s", "lease", "left", "units", "claims"]
    members = {line.split()[0]: line for line in lines if line.startswith(("m1", "m2"))}
    assert members["m1"].split()[4:] == ["2", "local-a/sp.orders.realtime.e1", "0-1"]
    assert members["m2"].split()[4:] == ["1", "local-a/sp.orders.bulk.e1", "3"]
    assert lines[-1] == (
        "unclaimed: local-a/sp.orders.bulk.e1 0-2; local-a/sp.orders.realtime.e1 2-3"
    )
    code, out, _ = run("groups", "describe", "g", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["recovering"] and doc["recovery_ends_s"] > 0
    assert [len(m["units"]) for m in doc["members"]] == [2, 1] and len(doc["unowned"]) == 5
    code, out, _ = run("groups", "list")
    assert code == 0 and out.splitlines()[2].split()[3:] == ["2", "8", "5", "0", "(recovering)"]


def test_the_recovering_note_says_when_the_window_ends() -> None:
    assert "for 1.2s more it answers each member with the units it claims" in (
        groups_cli.recovering_note(1.2)
    )
    assert "its recovery window is over: the group's next heartbeat rebuilds it" in (
        groups_cli.recovering_note(0.0)
    )
    assert "(or become the leader); it answers each member" in groups_cli.recovering_note(None)
