"""Where schemathesis's data-acceptance checks do not apply, and why: one list, used by
the in-suite test (tests/api/test_schemathesis.py) and by scripts/test-api-contract.sh
(``st run`` against ``argus serve``, through the checks this module registers).

Only ``positive_data_acceptance`` (a schema-valid request must not be a 400) and
``negative_data_rejection`` (a schema-violating one must be a 4xx among the usual ones)
are ever left out, for these cases alone; every other check runs on every case.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from schemathesis.checks import CHECKS

__all__ = ["NOT_DESCRIBABLE", "excluded", "positive_data_acceptance_where_describable",
           "negative_data_rejection_where_describable"]

# Where a schema-valid request is still refused (400), because what makes it valid is more
# than a schema can say. Only positive_data_acceptance is left out there, nothing else.
# - POST /tasks: a TaskSpec is checked beyond its shape (a known workload, paths inside
#   the caller's home, a gang that fits the cluster, ...): the schema says "YAML text or
#   an object"; test_bad_input.py and tests/taskspec check the refusals and their messages.
#   (/tasks/validate answers those with 200 and ok=false, so it keeps every check.)
# - POST /users/{user_id}/ssh-keys: a public key is checked beyond its shape (its base64
#   must decode to a key of an accepted kind and size); tests/sftp/test_keys_and_view.py
#   checks the refusals and their messages.
# - POST /files/{rest}: a move needs its source to exist and its destination to be free,
#   both in the caller's own areas (test_uploads.py checks the refusals).
# - The tus operations (/uploads): Upload-Metadata must name a writable path in base64, a
#   chunk's Upload-Checksum must be its bytes' digest, its offset where the upload stands
#   (test_uploads.py).
# - POST /teams/{team_id}/quotas: a lending limit above the nominal GPUs is refused (400),
#   and GET /usage: an until before since (400); test_teams.py checks both refusals.
NOT_DESCRIBABLE = {"POST /api/v2/teams/{team_id}/quotas", "GET /api/v2/usage", "POST /api/v2/tasks", "POST /api/v2/users/{user_id}/ssh-keys", "POST /api/v2/files/{rest}",
                   "POST /api/v2/uploads", "PATCH /api/v2/uploads/{upload_id}", "HEAD /api/v2/uploads/{upload_id}",
                   "DELETE /api/v2/uploads/{upload_id}"}
POSITIVE = "positive_data_acceptance"
NEGATIVE = "negative_data_rejection"


def excluded(case: schemathesis.Case) -> list[str]:
    """The names of the checks that do not apply to ``case`` (see the module's docstring)."""
    # tus answers a Tus-Resumable it does not speak with 412, as the protocol says (not
    # among the codes negative_data_rejection expects).
    sent = (case.headers or {}).get("Tus-Resumable")
    if "/uploads" in case.operation.label and sent is not None and sent != "1.0.0":
        return [POSITIVE, NEGATIVE]
    if case.operation.label in NOT_DESCRIBABLE:
        return [POSITIVE]
    # A page cursor is opaque: only a next_cursor the server returned is one (anything
    # else is a 400 naming it); no pattern can say which strings those are.
    if "cursor" in (case.query or {}):
        return [POSITIVE]
    return []


def _where_describable(name: str) -> Any:
    def check(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
        if name in excluded(case):
            return None
        return CHECKS.get_one(name)(ctx, response, case)  # looked up here: loaded lazily

    check.__name__ = f"{name}_where_describable"
    check.__doc__ = f"schemathesis's {name}, but where contract_rules.excluded leaves it out"
    return schemathesis.check(check)


# For `st run` (SCHEMATHESIS_HOOKS=tests.api.contract_rules): run these in place of the
# two built-in checks (--exclude-checks positive_data_acceptance,negative_data_rejection).
positive_data_acceptance_where_describable = _where_describable(POSITIVE)
negative_data_rejection_where_describable = _where_describable(NEGATIVE)
