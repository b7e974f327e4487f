"""Teams the config file seeds (``v2.scheduler.fairshare.teams``; docs/teams.md). Teams
live in the log (``argus.events.team_events``): at each start the API records, once, each
team here that the log does not hold yet (with its share and quotas), and moves each
member named here who is in no team yet into it. After that the log decides: a change made
with ``argus teams`` is kept, whatever the file says. Re-exported by ``argus.config``."""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = ["TeamQuotaSeed", "TeamSeed"]

Gpus = Annotated[float, msgspec.Meta(ge=0, le=1_000_000)]


class TeamQuotaSeed(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A team's quota of one GPU model: nominal GPUs, and how many more it may borrow and
    how many of its idle ones it may lend (absent: no limit)."""

    nominal_gpus: Gpus = 0.0
    borrowing_limit: Gpus | None = None
    lending_limit: Gpus | None = None


class TeamSeed(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One team: ``teams: {vision: {share: 2, members: [alice], quotas: {A100: {nominal_gpus: 8}}}}``
    (the quota key "" or ``any``: GPUs of any model)."""

    display_name: str = ""
    share: Annotated[float, msgspec.Meta(gt=0, le=1_000_000)] = 1.0
    members: list[str] = msgspec.field(default_factory=list)
    quotas: dict[str, TeamQuotaSeed] = msgspec.field(default_factory=dict)
