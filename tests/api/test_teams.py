"""Teams through the API: only admins change them (403 for others, a 4xx that says what
to change for bad input, and nothing written either way); a user sees their own team and
its figures, never another team or its users; usage rows are the caller's own."""

from __future__ import annotations

from typing import Any

from projections.teams import read_team_model
from tests.api.conftest import Env
from tests.support.sql import rows as sql_rows


async def _team_events(env: Env) -> int:
    return len(await sql_rows(env.store, "SELECT position FROM events WHERE stream = 'teams'", ()))


async def _post(env: Env, path: str, body: Any, who: str = "admin") -> Any:
    return await env.client.post(f"/api/v2{path}", json=body, headers=env.h(who))


async def _two_teams(env: Env) -> None:
    for team, user in (("vision", "alice"), ("nlp", "bob")):
        assert (await _post(env, "/teams", {"team_id": team, "share": 2})).status_code == 201
        r = await _post(env, f"/teams/{team}/members", {"user_id": user})
        assert r.status_code == 200, r.text
    r = await _post(env, "/teams/vision/quotas", {"gpu_model": "A100", "nominal_gpus": 8, "borrowing_limit": 4,
                                                  "lending_limit": 2})
    assert r.status_code == 200, r.text


async def test_admin_governs_teams_and_each_change_is_an_event_with_its_author(env: Env) -> None:
    await _two_teams(env)
    r = await env.client.get("/api/v2/teams/vision", headers=env.h("admin"))
    team = r.json()
    assert team["share"] == 2 and [m["user_id"] for m in team["members"]] == ["alice"]
    assert team["quotas"] == [{"gpu_model": "A100", "nominal_gpus": 8.0, "borrowing_limit": 4.0, "lending_limit": 2.0,
                               "set_at": team["quotas"][0]["set_at"], "set_by": "admin"}]
    # Moving alice to nlp takes her out of vision; the event names where she was.
    r = await _post(env, "/teams/nlp/members", {"user_id": "alice"})
    assert sorted(m["user_id"] for m in r.json()["members"]) == ["alice", "bob"]
    assert (await env.client.get("/api/v2/teams/vision", headers=env.h("admin"))).json()["member_count"] == 0
    rows = await sql_rows(env.store, "SELECT type, meta, CAST(data AS TEXT) FROM events WHERE stream = 'teams' ORDER BY position",
                          ())
    assert [r[0] for r in rows] == ["TeamCreated", "TeamMemberMoved", "TeamCreated", "TeamMemberMoved",
                                    "TeamQuotaSet", "TeamMemberMoved"]
    assert '"from_team":"vision"' in rows[-1][2] and all('"by":"admin"' in r[2] for r in rows)
    # The model a scheduler takes: each user's team, each team's share and quotas.
    model = await env.store.read_snapshot(read_team_model)
    assert model.team_of == {"alice": "nlp", "bob": "nlp"} and model.members("nlp") == ["alice", "bob"]
    assert model.teams["vision"].share == 2 and model.teams["vision"].quotas["A100"].lending_limit == 2
    # A quota of all zeros and nulls is removed.
    r = await _post(env, "/teams/vision/quotas", {"gpu_model": "A100"})
    assert r.json()["quotas"] == []


async def test_users_are_refused_and_bad_input_writes_nothing(env: Env) -> None:
    await _two_teams(env)
    before = await _team_events(env)
    for path, body in (("/teams", {"team_id": "mine"}), ("/teams/vision/members", {"user_id": "bob"}),
                       ("/teams/vision/share", {"share": 9}), ("/teams/vision/quotas", {"nominal_gpus": 99})):
        r = await _post(env, path, body, who="alice")
        assert r.status_code == 403, (path, r.text)
    bad = [
        ("/teams", {"team_id": "Bad Team!"}, 400, "team id"),
        ("/teams", {"team_id": "vision"}, 409, "exists already"),
        ("/teams", {"team_id": "t", "share": 0}, 400, "share"),
        ("/teams", {"team_id": "t", "color": "red"}, 400, "color"),
        ("/teams/vision/members", {"user_id": "nobody"}, 404, "nobody"),
        ("/teams/ghost/members", {"user_id": "alice"}, 404, "ghost"),
        ("/teams/vision/share", {"share": -1}, 400, "share"),
        ("/teams/vision/quotas", {"gpu_model": "A100", "nominal_gpus": 2, "lending_limit": 3}, 400, "lending_limit"),
        ("/teams/vision/quotas", {"gpu_model": "a b/c", "nominal_gpus": 2}, 400, "gpu_model"),
        ("/teams/vision/quotas", {"nominal_gpus": -2}, 400, "nominal_gpus"),
    ]
    for path, body, status, word in bad:
        r = await _post(env, path, body)
        assert r.status_code == status and word in r.text, (path, body, r.status_code, r.text)
    assert await _team_events(env) == before


async def test_a_user_sees_their_own_team_never_another_teams_users(env: Env) -> None:
    await _two_teams(env)
    mine = (await env.client.get("/api/v2/teams", headers=env.h("alice"))).json()
    assert [t["team_id"] for t in mine] == ["vision"] and mine[0]["quotas"][0]["nominal_gpus"] == 8
    r = await env.client.get("/api/v2/teams/vision", headers=env.h("alice"))
    assert r.status_code == 200 and [m["user_id"] for m in r.json()["members"]] == ["alice"]
    r = await env.client.get("/api/v2/teams/nlp", headers=env.h("alice"))
    assert r.status_code == 404 and "bob" not in r.text
    assert "bob" not in (await env.client.get("/api/v2/teams", headers=env.h("alice"))).text
    # dave's account is disabled; carol is in no team: she sees none.
    r = await _post(env, "/users", {"user_id": "carol"})
    token = (await _post(env, "/users/carol/tokens", {"label": "t"})).json()["token"]
    r = await env.client.get("/api/v2/teams", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and r.json() == []
    everyone = (await env.client.get("/api/v2/teams", headers=env.h("admin"))).json()
    assert [t["team_id"] for t in everyone] == ["nlp", "vision"]


async def test_usage_rows_are_the_callers_own(env: Env) -> None:
    await _two_teams(env)
    for who, by, want in (("alice", "user", "alice"), ("alice", "team", "vision"), ("bob", "team", "nlp")):
        r = await env.client.get(f"/api/v2/usage?by={by}&since=2020-01-01", headers=env.h(who))
        assert r.status_code == 200, r.text
        assert all(row["key"] == want for row in r.json()["rows"]), r.text
    for query, word in (("since=yesterday", "since"), ("since=2026-02-02&until=2026-02-01", "after"),
                        ("by=project", "by")):
        r = await env.client.get(f"/api/v2/usage?{query}", headers=env.h("alice"))
        assert r.status_code == 400 and word in r.text, (query, r.text)
