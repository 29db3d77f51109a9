"""HTTP API of the Assigner: heartbeats, leaving, describing a group, listing the groups."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from streamplane.controlplane.assigner import AssignerService
from streamplane.controlplane.schemas import LaneName, StreamName
from streamplane.core.assignment import MemberLoad, UnitLoad, WorkUnit


class UnitRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str = Field(min_length=1, max_length=200)
    topic: str = Field(min_length=1, max_length=249)
    partition: int = Field(ge=0, le=1_000_000)

    def unit(self) -> WorkUnit:
        return WorkUnit(self.topic, self.partition, self.cluster)

    @classmethod
    def of(cls, u: WorkUnit) -> UnitRef:
        return cls(cluster=u.cluster, topic=u.topic, partition=u.partition)


class UnitLoadIn(UnitRef):
    throughput: float = Field(default=0.0, ge=0, le=1e12)
    backlog: int = Field(default=0, ge=0)


class MemberHeartbeatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    member_id: str = Field(min_length=1, max_length=200)
    stream: StreamName
    lanes: list[LaneName] = Field(min_length=1, max_length=32)
    cpu: float = Field(default=0.0, ge=0, le=1)
    records_per_s: float = Field(default=0.0, ge=0, le=1e12)
    units: list[UnitLoadIn] = Field(default_factory=list, max_length=100_000)
    released: list[UnitRef] = Field(default_factory=list, max_length=100_000)
    claims: list[UnitRef] = Field(default_factory=list, max_length=100_000)


class MemberHeartbeatOut(BaseModel):
    work_units: list[UnitRef]
    release: list[UnitRef]
    lease_s: float
    generation: int
    # The member was admitted by this heartbeat: it was new, or its lease had expired and
    # it lost its units (any unit listed may have had another holder since).
    joined: bool = False


UNIT_FORMAT = "cluster/topic/partition"


class GroupMemberOut(BaseModel):
    member_id: str
    units: list[str] = Field(
        description=f"The units it may process ({UNIT_FORMAT}); while the Assigner is "
        "recovering, the units it claims in its heartbeats (and was answered with)."
    )
    releasing: list[str] = Field(description="Units it holds and was told to release.")
    lease_s: float = Field(description="Seconds until its lease ends.")
    cpu: float = Field(description="Share of its CPU in use (0..1), as it last reported.")
    records_per_s: float = Field(description="Over all its units, as it last reported.")


class PendingReleaseOut(BaseModel):
    unit: str = Field(description=UNIT_FORMAT)
    holder: str = Field(description="The member that must let it go.")
    target: str | None = Field(
        description="The member it goes to next; null: none yet (or it left the routing)."
    )
    deadline_s: float = Field(
        description="Seconds until the holder's last lease listing it ends (then it moves)."
    )


class GroupOut(BaseModel):
    group: str
    stream: str
    lanes: list[str]
    generation: int
    recovering: bool = Field(
        description="The Assigner has just started or become the leader (or its process "
        "was paused): for a recovery window it answers each member with the units it "
        "claims, then rebuilds the group from those claims and balances it. Meanwhile "
        "`members` are the members heard so far with the units each claims, and "
        "`unowned` the units none of them claims."
    )
    recovery_ends_s: float | None = Field(
        default=None,
        description="While recovering: seconds until the recovery window ends (0: it is "
        "over, and the group's next heartbeat rebuilds it); null otherwise.",
    )
    units: int = Field(
        description="Work units (partitions of the lanes' readable segments), as of the "
        "group's last heartbeat (while recovering, as of now)."
    )
    members: list[GroupMemberOut]
    pending_release: list[PendingReleaseOut]
    unowned: list[str] = Field(
        description=f"Units no member holds ({UNIT_FORMAT}); while recovering, units no "
        "member heard so far claims."
    )


class GroupSummaryOut(BaseModel):
    group: str
    stream: str
    lanes: list[str]
    generation: int
    recovering: bool
    members: int = Field(description="Members holding a lease.")
    units: int
    unowned: int

    @classmethod
    def of(cls, doc: GroupOut) -> GroupSummaryOut:
        return cls(
            **doc.model_dump(include={"group", "stream", "lanes", "generation", "recovering"}),
            members=len(doc.members),
            units=doc.units,
            unowned=len(doc.unowned),
        )


def groups_router(
    assigner: AssignerService,
    require_token: Callable[..., Any],
    errors: Callable[..., dict[int | str, dict[str, Any]]],
    is_leader: Callable[[], bool],
    saw_reader: Callable[[str, str, Sequence[str]], None],
) -> APIRouter:
    """The router; ``require_token`` is the app's token check, ``errors`` documents errors,
    ``is_leader`` tells whether this replica leads (only the leader's Assigner answers;
    followers forward, ``leader_proxy``), ``saw_reader(stream, group, lanes)`` is told
    of each answered heartbeat (the sealer keeps segments for the groups reading them)."""
    router = APIRouter(tags=["groups"])

    def leader_only() -> None:
        leader = is_leader()
        assigner.lead(leader)
        if not leader:
            # Followers forward these routes to the leader (leader_proxy): this one
            # stopped leading since, or was forwarded to while not leading.
            raise HTTPException(
                503,
                "this control-plane replica is not the leader (leadership is moving): "
                "groups are served by the leader's Assigner only",
                headers={"Retry-After": "1"},
            )

    auth = [Depends(require_token), Depends(leader_only)]

    @router.post(
        "/v1/groups/{group}/heartbeat",
        response_model=MemberHeartbeatOut,
        dependencies=auth,
        responses=errors(400, 401, 403, 404, 422, 503),
    )
    def heartbeat(group: str, body: MemberHeartbeatIn) -> MemberHeartbeatOut:
        load = MemberLoad(
            cpu=body.cpu,
            records_per_s=body.records_per_s,
            units={u.unit(): UnitLoad(u.throughput, u.backlog) for u in body.units},
        )
        answer = assigner.heartbeat(
            group,
            body.stream,
            body.lanes,
            body.member_id,
            load,
            released=[u.unit() for u in body.released],
            claims=[u.unit() for u in body.claims],
        )
        saw_reader(body.stream, group, body.lanes)
        return MemberHeartbeatOut(
            work_units=[UnitRef.of(u) for u in sorted(answer.work_units, key=_key)],
            release=[UnitRef.of(u) for u in sorted(answer.release, key=_key)],
            lease_s=answer.lease_s,
            generation=answer.generation,
            joined=answer.joined,
        )

    @router.delete(
        "/v1/groups/{group}/members/{member_id}",
        status_code=204,
        dependencies=auth,
        responses=errors(401, 403, 422, 503),
    )
    def leave(group: str, member_id: str) -> None:
        assigner.leave(group, member_id)

    @router.get(
        "/v1/groups/{group}/members",
        response_model=GroupOut,
        dependencies=[Depends(leader_only)],
        responses=errors(404, 422, 503),
    )
    def describe(group: str) -> GroupOut:
        try:
            return GroupOut.model_validate(assigner.describe(group))
        except KeyError:
            known = ", ".join(assigner.groups()) or "none"
            raise HTTPException(
                404,
                f"unknown group {group!r}: no member of it has heartbeated to the Assigner "
                f"(known: {known})",
            ) from None

    @router.get(
        "/v1/assigner/groups",
        response_model=list[GroupSummaryOut],
        dependencies=[Depends(leader_only)],
        responses=errors(503),
        description="Every group the Assigner knows (a member heartbeated to it since it "
        "started or became the leader): members, units, generation. `GET /v1/groups` "
        "lists the groups with committed offsets and their lag (the lag monitor).",
    )
    def list_groups() -> list[GroupSummaryOut]:
        return [GroupSummaryOut.of(GroupOut.model_validate(doc)) for doc in assigner.describe_all()]

    return router


def _key(u: WorkUnit) -> tuple[str, str, int]:
    return (u.cluster, u.topic, u.partition)
