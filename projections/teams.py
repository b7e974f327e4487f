"""Teams (issue 56): one entity, every team of the ``teams`` stream, folded from
TeamCreated / TeamMemberMoved / TeamShareSet / TeamQuotaSet. The fold refuses what does not
fit the teams' history (a second team of one name, a move into a team that does not exist,
a move whose ``from_team`` is not where the user is), so the store refuses the append whole.

Reads: ``team_list`` / ``team_detail`` (what the API shows) and ``read_team_model``, the
typed model a scheduler can take (``TeamModel``: each user's team, each team's share and
quotas; pure data, no database)."""

from __future__ import annotations

import sqlite3
from typing import Sequence

import msgspec

from argus.events import Recorded, TeamCreated, TeamMemberMoved, TeamQuotaSet, TeamShareSet
from argus.store.errors import InvariantViolation
from projections.base import Change, EntityFold, EntityProjection

__all__ = [
    "GpuQuota", "TEAMS_FOLD", "TeamDetail", "TeamEventError", "TeamMember", "TeamModel", "TeamPolicy", "TeamSummary",
    "TeamsFold", "TeamsProjection", "TeamsView", "evolve_teams", "read_team_model", "team_detail", "team_list",
    "team_of",
]


class GpuQuota(msgspec.Struct, frozen=True, kw_only=True):
    """A team's quota of one GPU model ("" : any model); None limits: no limit."""

    gpu_model: str
    nominal_gpus: float
    borrowing_limit: float | None = None
    lending_limit: float | None = None
    set_at: float = 0.0
    set_by: str = ""


class TeamMember(msgspec.Struct, frozen=True, kw_only=True):
    user_id: str
    team_id: str
    since: float
    moved_by: str


class TeamRow(msgspec.Struct, frozen=True, kw_only=True):
    team_id: str
    display_name: str
    share: float
    created_at: float
    created_by: str
    quotas: tuple[GpuQuota, ...] = ()


class TeamsView(msgspec.Struct, frozen=True, kw_only=True):
    """Every team and every member, as the log says now."""

    teams: tuple[TeamRow, ...] = ()
    members: tuple[TeamMember, ...] = ()


class TeamEventError(InvariantViolation, ValueError):
    """A team event that does not fit the teams' history: the store refuses the append."""


_replace = msgspec.structs.replace


def _team(view: TeamsView, team_id: str, rec: Recorded) -> TeamRow:
    for t in view.teams:
        if t.team_id == team_id:
            return t
    raise TeamEventError(f"{rec.type}: no team {team_id!r} (argus teams create {team_id})")


def _with_team(view: TeamsView, team: TeamRow) -> TeamsView:
    return _replace(view, teams=tuple(team if t.team_id == team.team_id else t for t in view.teams))


def _quota(team: TeamRow, e: TeamQuotaSet) -> TeamRow:
    kept = tuple(q for q in team.quotas if q.gpu_model != e.gpu_model)
    if e.nominal_gpus == 0 and e.borrowing_limit is None and e.lending_limit is None:
        return _replace(team, quotas=kept)  # all defaults: the quota is removed
    quota = GpuQuota(gpu_model=e.gpu_model, nominal_gpus=e.nominal_gpus, borrowing_limit=e.borrowing_limit,
                     lending_limit=e.lending_limit, set_at=e.at, set_by=e.by)
    return _replace(team, quotas=tuple(sorted((*kept, quota), key=lambda q: q.gpu_model)))


def evolve_teams(view: TeamsView | None, rec: Recorded) -> TeamsView:
    """Pure: the teams after ``rec``."""
    view = view or TeamsView()
    e = rec.event
    if isinstance(e, TeamCreated):
        if any(t.team_id == e.team_id for t in view.teams):
            raise TeamEventError(f"team {e.team_id!r} exists already")
        row = TeamRow(team_id=e.team_id, display_name=e.display_name, share=e.share, created_at=e.at, created_by=e.by)
        return _replace(view, teams=tuple(sorted((*view.teams, row), key=lambda t: t.team_id)))
    if isinstance(e, TeamShareSet):
        return _with_team(view, _replace(_team(view, e.team_id, rec), share=e.share))
    if isinstance(e, TeamQuotaSet):
        return _with_team(view, _quota(_team(view, e.team_id, rec), e))
    if isinstance(e, TeamMemberMoved):
        _team(view, e.team_id, rec)
        now = next((m.team_id for m in view.members if m.user_id == e.user_id), "")
        if now != e.from_team:
            raise TeamEventError(f"user {e.user_id} is in {now or 'no team'}, not {e.from_team or 'no team'}")
        member = TeamMember(user_id=e.user_id, team_id=e.team_id, since=e.at, moved_by=e.by)
        rest = tuple(m for m in view.members if m.user_id != e.user_id)
        return _replace(view, members=tuple(sorted((*rest, member), key=lambda m: m.user_id)))
    raise TypeError(f"not a team event: {rec.type}")


_TEAM_COLUMNS = "team_id, display_name, share, created_at, created_by"
_MEMBER_COLUMNS = "user_id, team_id, since, moved_by"
_QUOTA_COLUMNS = "team_id, gpu_model, nominal_gpus, borrowing_limit, lending_limit, set_at, set_by"


def _load(db: sqlite3.Connection) -> TeamsView:
    quotas: dict[str, list[GpuQuota]] = {}
    for r in db.execute(f"SELECT {_QUOTA_COLUMNS} FROM team_quotas ORDER BY team_id, gpu_model"):
        quotas.setdefault(r[0], []).append(GpuQuota(gpu_model=r[1], nominal_gpus=r[2], borrowing_limit=r[3],
                                                    lending_limit=r[4], set_at=r[5], set_by=r[6]))
    teams = tuple(TeamRow(team_id=r[0], display_name=r[1], share=r[2], created_at=r[3], created_by=r[4],
                          quotas=tuple(quotas.get(r[0], ())))
                  for r in db.execute(f"SELECT {_TEAM_COLUMNS} FROM teams ORDER BY team_id"))
    members = tuple(TeamMember(user_id=r[0], team_id=r[1], since=r[2], moved_by=r[3])
                    for r in db.execute(f"SELECT {_MEMBER_COLUMNS} FROM team_members ORDER BY user_id"))
    return TeamsView(teams=teams, members=members)


class TeamsFold(EntityFold[TeamsView]):
    """Team events -> the one ``TeamsView``; its home is the ``teams`` tables."""

    name = "teams"
    entity = TeamsView
    handles = frozenset({"TeamCreated", "TeamMemberMoved", "TeamShareSet", "TeamQuotaSet"})
    home = "teams"

    def key(self, rec: Recorded) -> str:
        return "teams"

    def evolve(self, entity: TeamsView | None, rec: Recorded) -> TeamsView:
        return evolve_teams(entity, rec)

    def load(self, db: sqlite3.Connection, key: str) -> TeamsView | None:
        return _load(db)


TEAMS_FOLD = TeamsFold()


class TeamsProjection(EntityProjection[TeamsView]):
    """``teams``, ``team_members``, ``team_quotas``: a few rows, written whole on a change."""

    name = "teams"
    version = 1
    tables = ("teams", "team_members", "team_quotas")
    fold = TEAMS_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[TeamsView]]) -> None:
        for key, _, after in changes:  # one entity: every team
            assert after is not None
            for table in self.tables:
                db.execute(f"DELETE FROM {table}")
            self.write_all(db, {key: after})

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TeamsView]) -> None:
        for view in entities.values():
            db.executemany(f"INSERT INTO teams ({_TEAM_COLUMNS}) VALUES (?,?,?,?,?)",
                           [(t.team_id, t.display_name, t.share, t.created_at, t.created_by) for t in view.teams])
            db.executemany(f"INSERT INTO team_members ({_MEMBER_COLUMNS}) VALUES (?,?,?,?)",
                           [(m.user_id, m.team_id, m.since, m.moved_by) for m in view.members])
            db.executemany(f"INSERT INTO team_quotas ({_QUOTA_COLUMNS}) VALUES (?,?,?,?,?,?,?)",
                           [(t.team_id, q.gpu_model, q.nominal_gpus, q.borrowing_limit, q.lending_limit, q.set_at,
                             q.set_by) for t in view.teams for q in t.quotas])


# ---------------------------------------------------------------------------- reads


class TeamSummary(msgspec.Struct, kw_only=True):
    """A team as the API lists it: its figures and how many members it has."""

    team_id: str
    display_name: str
    share: float
    created_at: float
    created_by: str
    quotas: list[GpuQuota]
    member_count: int


class TeamDetail(TeamSummary, kw_only=True):
    """A team with its members (shown to admins, and to the team's own members)."""

    members: list[TeamMember]


def _summary(t: TeamRow, members: int) -> TeamSummary:
    return TeamSummary(team_id=t.team_id, display_name=t.display_name, share=t.share, created_at=t.created_at,
                       created_by=t.created_by, quotas=list(t.quotas), member_count=members)


def team_list(db: sqlite3.Connection) -> list[TeamSummary]:
    """Every team, by id."""
    view = _load(db)
    counts: dict[str, int] = {}
    for m in view.members:
        counts[m.team_id] = counts.get(m.team_id, 0) + 1
    return [_summary(t, counts.get(t.team_id, 0)) for t in view.teams]


def team_detail(db: sqlite3.Connection, team_id: str) -> TeamDetail | None:
    """One team with its members (None: no such team)."""
    view = _load(db)
    team = next((t for t in view.teams if t.team_id == team_id), None)
    if team is None:
        return None
    members = [m for m in view.members if m.team_id == team_id]
    s = _summary(team, len(members))
    return TeamDetail(**{f: getattr(s, f) for f in s.__struct_fields__}, members=members)


def team_of(db: sqlite3.Connection, user_id: str) -> str:
    """The user's team ("" : none)."""
    row = db.execute("SELECT team_id FROM team_members WHERE user_id = ?", (user_id,)).fetchone()
    return str(row[0]) if row else ""


class TeamPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """One team as a scheduler takes it: its share and its quota per GPU model."""

    share: float
    quotas: dict[str, GpuQuota]


class TeamModel(msgspec.Struct, frozen=True, kw_only=True):
    """Teams as a scheduler takes them (pure data): ``team_of`` each user in a team,
    ``teams`` by id. Users in no team are in none of them."""

    team_of: dict[str, str]
    teams: dict[str, TeamPolicy]

    def members(self, team_id: str) -> list[str]:
        """The team's users, by id."""
        return sorted(u for u, t in self.team_of.items() if t == team_id)


def read_team_model(db: sqlite3.Connection) -> TeamModel:
    """The teams as the log says now, for a scheduler."""
    view = _load(db)
    return TeamModel(team_of={m.user_id: m.team_id for m in view.members},
                     teams={t.team_id: TeamPolicy(share=t.share, quotas={q.gpu_model: q for q in t.quotas})
                            for t in view.teams})
