"""Teams (admins change them; a user sees their own team) and usage (``GET /usage``:
users see their own rows, admins every row). docs/teams.md."""

from __future__ import annotations

import datetime as dt
import time
from typing import Annotated, Any, Literal, cast

from litestar import Controller, Request, get, post
from litestar.datastructures import State
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import Parameter

from argus.api.auth import request_id, require_admin
from argus.api.openapi import errors
from argus.api.reads import Reads
from argus.service import Principal
from argus.api.schemas import CreateTeam, MoveMemberIn, SetQuota, SetShare
from argus.service.teams import TeamCommands
from projections.teams import TeamDetail, TeamSummary
from projections.usage_report import UsageReport

__all__ = ["TeamsController", "usage_view"]

DAY = 86400.0


def _teams(state: State) -> TeamCommands:
    return cast(TeamCommands, state.teams)  # made at start-up, in create_app


async def _visible(reads: Reads, who: Principal, team_id: str) -> TeamDetail:
    # A user asking about another team gets 404, as for tasks and users: ids do not leak.
    if not who.is_admin and await reads.team_of(who.user_id) != team_id:
        raise NotFoundException(f"team {team_id!r} not found")
    team = await reads.team(team_id)
    if team is None:
        raise NotFoundException(f"team {team_id!r} not found")
    return team


class TeamsController(Controller):
    path = "/teams"
    tags = ["teams"]

    @get("/")
    async def list_teams(self, reads: Reads, who: Principal) -> list[TeamSummary]:
        """Every team (admin); a user: their own team only (none when they are in none)."""
        teams = await reads.teams()
        if who.is_admin:
            return teams
        mine = await reads.team_of(who.user_id)
        return [t for t in teams if t.team_id == mine]

    @post("/", status_code=201, responses=errors(400, 403, 409))
    async def create_team(self, request: Request[Any, Any, Any], state: State, reads: Reads, who: Principal,
                          data: CreateTeam) -> TeamDetail:
        """Create a team with its share (admin)."""
        require_admin(who)
        await _teams(state).create(who, data, request_id(request))
        return await _visible(reads, who, data.team_id)

    @get("/{team_id:str}", responses=errors(404))
    async def get_team(self, reads: Reads, who: Principal, team_id: str) -> TeamDetail:
        """One team, its quotas and members (admin, or a member of the team)."""
        return await _visible(reads, who, team_id)

    @post("/{team_id:str}/members", status_code=200, responses=errors(403, 404, 409))
    async def move_member(self, request: Request[Any, Any, Any], state: State, reads: Reads, who: Principal,
                          team_id: str, data: MoveMemberIn) -> TeamDetail:
        """Move a user into this team, out of the one they were in (admin)."""
        require_admin(who)
        await _teams(state).move(who, team_id, data.user_id, request_id(request))
        return await _visible(reads, who, team_id)

    @post("/{team_id:str}/share", status_code=200, responses=errors(400, 403, 404))
    async def set_share(self, request: Request[Any, Any, Any], state: State, reads: Reads, who: Principal,
                        team_id: str, data: SetShare) -> TeamDetail:
        """Set the team's share, relative to the other teams' (admin)."""
        require_admin(who)
        await _teams(state).set_share(who, team_id, data, request_id(request))
        return await _visible(reads, who, team_id)

    @post("/{team_id:str}/quotas", status_code=200, responses=errors(400, 403, 404))
    async def set_quota(self, request: Request[Any, Any, Any], state: State, reads: Reads, who: Principal,
                        team_id: str, data: SetQuota) -> TeamDetail:
        """Set the team's quota of one GPU model: nominal GPUs, borrowing and lending
        limits (null: no limit); all zero and null removes it (admin)."""
        require_admin(who)
        await _teams(state).set_quota(who, team_id, data, request_id(request))
        return await _visible(reads, who, team_id)


def _midnight(day: dt.date) -> float:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp()


@get("/usage", tags=["teams"], responses=errors(400))
async def usage_view(
    reads: Reads, who: Principal,
    by: Literal["team", "user"] = "user",
    since: Annotated[dt.date | None, Parameter(description="first day, YYYY-MM-DD (UTC); default: 30 days ago")] = None,
    until: Annotated[dt.date | None, Parameter(description="the day after the last, YYYY-MM-DD (UTC); "
                                               "default: now")] = None,
) -> UsageReport:
    """GPU-hours by GPU model, wait hours and goodput, by team or user and by day (UTC),
    counted from the log (docs/teams.md). Users see their own rows (by team: their own
    team's); admins every row."""
    now = time.time()
    start = _midnight(since) if since else (now // DAY - 30) * DAY
    end = _midnight(until) if until else now
    if end <= start:
        raise HTTPException(status_code=400, detail="until must come after since: give an until after "
                                                    f"{dt.datetime.fromtimestamp(start, dt.timezone.utc).date().isoformat()}")
    report = await reads.usage(by=by, since=start, until=end, now=now)
    if not who.is_admin:
        mine = who.user_id if by == "user" else await reads.team_of(who.user_id)
        report.rows = [r for r in report.rows if mine and r.key == mine]
        report.gpu_models = sorted({m for r in report.rows for m in r.gpu_hours_by_model})  # theirs only
    return report
