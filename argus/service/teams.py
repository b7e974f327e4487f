"""Teams' commands (issue 56; docs/teams.md): an admin creates a team, moves a user into
it, sets its share and its quota per GPU model. Each is checked against the projections,
then appended to the ``teams`` stream with its author; bad input is a ``CommandError``
(4xx) and nothing is written. ``seed`` records the config file's teams, once."""

from __future__ import annotations

import math
import re
import time
from typing import TYPE_CHECKING, Annotated

import msgspec

from argus.events import (
    EventBase, EventMeta, TeamCreated, TeamMemberMoved, TeamQuotaSet, TeamShareSet, teams_stream,
)
from argus.service.auth import Principal
from argus.service.commands import CommandError, NotFound
from argus.store import AppendBatch, ConcurrencyConflict, InvariantViolation
from projections.reads import ProjectionReads
from projections.teams import TeamModel

if TYPE_CHECKING:
    from argus.config import TeamSeed
    from argus.service.commands import Commands

__all__ = ["CreateTeam", "SetQuota", "SetShare", "TEAM_ID_RULE", "TeamCommands", "team_id_problem"]

TEAM_ID_RULE = "1-32 characters: lower-case letters, digits, '_' or '-', starting with a letter"
_TEAM_ID = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# Patterns for the document only (as for user ids): the command refuses a bad one with the rule in words.
TeamId = Annotated[str, msgspec.Meta(extra_json_schema={
    "description": f"Team id: {TEAM_ID_RULE}.", "extra": {"pattern": "^" + _TEAM_ID.pattern + "$"}})]
GpuModel = Annotated[str, msgspec.Meta(max_length=64, extra_json_schema={
    "description": "A GPU model as `argus cluster` shows it; \"any\" or \"\": any model.",
    "extra": {"pattern": "^(|any|\\*|" + _MODEL.pattern + ")$"}})]
Share = Annotated[float, msgspec.Meta(gt=0, le=1_000_000)]
Gpus = Annotated[float, msgspec.Meta(ge=0, le=1_000_000)]


class CreateTeam(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /teams``: a new team and its share (relative to the other teams')."""

    team_id: TeamId
    display_name: Annotated[str, msgspec.Meta(max_length=200)] = ""
    share: Share = 1.0


class SetShare(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /teams/{id}/share``."""

    share: Share


class SetQuota(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /teams/{id}/quotas``: the quota of one GPU model ("" or "any": any model);
    null limits: no limit; all zero and null: the quota is removed."""

    gpu_model: GpuModel = ""
    nominal_gpus: Gpus = 0.0
    borrowing_limit: Gpus | None = None
    lending_limit: Gpus | None = None


def team_id_problem(team_id: str) -> str | None:
    """None for a valid team id, else what is wrong."""
    if _TEAM_ID.fullmatch(team_id):
        return None
    return f"team id {team_id[:64]!r} is not allowed: {TEAM_ID_RULE}"


def _model(name: str) -> str:
    """The stored name of a GPU model ("" for any model)."""
    if name in ("", "any", "*"):
        return ""
    if not _MODEL.fullmatch(name):
        raise CommandError(400, f"gpu_model {name[:64]!r} is not a GPU model name: letters, digits, '_', '.', '-' "
                                "(as `argus cluster` shows a node's model), or \"any\"")
    return name


def _finite(*values: float | None) -> None:
    if any(v is not None and not math.isfinite(v) for v in values):
        raise CommandError(400, "GPU figures must be finite numbers")


class TeamCommands:
    """The write side of teams, on ``commands``' log (its group commit)."""

    def __init__(self, commands: "Commands") -> None:
        self.commands = commands
        self.store = commands.store

    async def model(self) -> TeamModel:
        return await ProjectionReads(self.store).team_model()

    async def _append(self, events: list[EventBase], actor: str, request_id: str) -> None:
        batch = AppendBatch(stream=teams_stream, expected_version=None, events=events)
        try:
            await self.commands.log.append_batches([batch], meta=EventMeta(actor=actor, request_id=request_id))
        except (ConcurrencyConflict, InvariantViolation) as exc:  # the fold refused it: it raced another change
            raise CommandError(409, str(exc)) from exc

    async def _user_exists(self, user_id: str) -> bool:
        return await ProjectionReads(self.store).user(user_id) is not None

    async def _require_team(self, team_id: str) -> TeamModel:
        model = await self.model()
        if team_id not in model.teams:
            raise NotFound(f"team {team_id!r}")
        return model

    async def create(self, who: Principal, data: CreateTeam, request_id: str = "") -> None:
        problem = team_id_problem(data.team_id)
        if problem is not None:
            raise CommandError(400, problem)
        _finite(data.share)
        if data.team_id in (await self.model()).teams:
            raise CommandError(409, f"team {data.team_id!r} exists already")
        await self._append([TeamCreated(team_id=data.team_id, display_name=data.display_name, share=data.share,
                                        by=who.user_id, at=time.time())], who.actor, request_id)

    async def move(self, who: Principal, team_id: str, user_id: str, request_id: str = "") -> bool:
        """Move ``user_id`` into ``team_id``; False when they are in it already (nothing written)."""
        model = await self._require_team(team_id)
        if not await self._user_exists(user_id):
            raise NotFound(f"user {user_id!r}")
        now_in = model.team_of.get(user_id, "")
        if now_in == team_id:
            return False
        await self._append([TeamMemberMoved(user_id=user_id, team_id=team_id, from_team=now_in, by=who.user_id,
                                            at=time.time())], who.actor, request_id)
        return True

    async def set_share(self, who: Principal, team_id: str, data: SetShare, request_id: str = "") -> None:
        await self._require_team(team_id)
        _finite(data.share)
        await self._append([TeamShareSet(team_id=team_id, share=data.share, by=who.user_id, at=time.time())],
                           who.actor, request_id)

    async def set_quota(self, who: Principal, team_id: str, data: SetQuota, request_id: str = "") -> None:
        await self._require_team(team_id)
        _finite(data.nominal_gpus, data.borrowing_limit, data.lending_limit)
        if data.lending_limit is not None and data.lending_limit > data.nominal_gpus:
            raise CommandError(400, f"lending_limit {data.lending_limit:g} is above nominal_gpus "
                                    f"{data.nominal_gpus:g}: a team lends only GPUs of its own quota")
        await self._append([TeamQuotaSet(team_id=team_id, gpu_model=_model(data.gpu_model),
                                         nominal_gpus=data.nominal_gpus, borrowing_limit=data.borrowing_limit,
                                         lending_limit=data.lending_limit, by=who.user_id, at=time.time())],
                           who.actor, request_id)

    async def seed(self, teams: dict[str, "TeamSeed"], by: str = "config") -> int:
        """Record the config file's ``teams`` that the log lacks, and move each named member
        who is in no team yet (users not created yet: at a later start). Returns how many
        events it appended; 0 at every start after the first (idempotent)."""
        model, now = await self.model(), time.time()
        events: list[EventBase] = []
        for team_id, seed in sorted(teams.items()):
            problem = team_id_problem(team_id)
            if problem is not None:
                raise CommandError(400, f"v2.scheduler.fairshare.teams: {problem}")
            if team_id not in model.teams:
                events.append(TeamCreated(team_id=team_id, display_name=seed.display_name, share=seed.share, by=by,
                                          at=now))
                events += [TeamQuotaSet(team_id=team_id, gpu_model=_model(name), nominal_gpus=q.nominal_gpus,
                                        borrowing_limit=q.borrowing_limit, lending_limit=q.lending_limit, by=by,
                                        at=now) for name, q in sorted(seed.quotas.items())]
            for user in seed.members:
                if user in model.team_of or any(isinstance(e, TeamMemberMoved) and e.user_id == user for e in events):
                    continue  # in a team already: the log decides now
                if await self._user_exists(user):
                    events.append(TeamMemberMoved(user_id=user, team_id=team_id, by=by, at=now))
        if events:
            await self._append(events, by, "")
        return len(events)
