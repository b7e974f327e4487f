"""Teams: a level above the user (issue 56). An admin creates a team, moves users into it,
and sets its share and its quota per GPU model; each change is an event of the ``teams``
stream with its author (``by``) and time (``at``), so replay shows who could use what when.

The scheduler does not act on them yet: they are recorded, shown, seeded from the config
(``v2.scheduler.fairshare.teams``), and read as one typed model (``projections.teams``).
"""

from __future__ import annotations

from argus.events.base import EventBase

__all__ = ["TeamCreated", "TeamMemberMoved", "TeamQuotaSet", "TeamShareSet", "teams_stream"]

# One stream for every team: moving a user touches two teams, and a team is a few rows.
teams_stream = "teams"


class TeamCreated(EventBase, frozen=True, kw_only=True, tag="TeamCreated"):
    """A team exists, with its share of the cluster relative to the other teams'."""

    team_id: str
    display_name: str = ""
    share: float = 1.0
    by: str
    at: float


class TeamMemberMoved(EventBase, frozen=True, kw_only=True, tag="TeamMemberMoved"):
    """``user_id`` belongs to ``team_id`` from now on (``from_team``: where they were,
    "" for no team). A user is in one team at most."""

    user_id: str
    team_id: str
    from_team: str = ""
    by: str
    at: float


class TeamShareSet(EventBase, frozen=True, kw_only=True, tag="TeamShareSet"):
    """The team's share of the cluster, relative to the other teams' (1: an equal part)."""

    team_id: str
    share: float
    by: str
    at: float


class TeamQuotaSet(EventBase, frozen=True, kw_only=True, tag="TeamQuotaSet"):
    """The team's quota of one GPU model (``gpu_model`` "" : GPUs of any model), as Kueue
    has it: ``nominal_gpus`` guaranteed, at most ``borrowing_limit`` GPUs more borrowed
    from idle ones, at most ``lending_limit`` of its idle nominal GPUs lent to others
    (None: no limit). All zero and None: the quota is removed."""

    team_id: str
    gpu_model: str = ""
    nominal_gpus: float = 0.0
    borrowing_limit: float | None = None
    lending_limit: float | None = None
    by: str
    at: float
