"""The served OpenAPI document against the app's behaviour (in-process ASGI), with
schemathesis's standard checks, the ones ``st run`` uses: no 5xx; documented status codes,
content types, headers and bodies; schema-valid requests accepted and schema-violating ones
refused; undeclared methods a 405 with a correct ``Allow``; a missing required header
refused; authentication enforced where declared. Every phase the pytest integration runs
(explicit examples, coverage, fuzzing), positive and negative data.

Bounded and reproducible: a fixed seed (every operation draws the same cases on every run),
a few fuzzed examples per operation, 15 stateful sequences of at most 6 calls, and a limit on
each answer's time; the whole module takes about 10 s on two cores.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS
from schemathesis.python.asgi import shutdown_lifespans

from argus.api.app import create_app
from tests.api.conftest import ADMIN_TOKEN, make_config

SEED = 23
# Cases per operation and stateful sequences. The suite runs a few; the deeper run a change
# to the API or its schema deserves: ST_EXAMPLES=60 ST_SEQUENCES=40 (about 35 s).
EXAMPLES = int(os.environ.get("ST_EXAMPLES", "8"))
SEQUENCES = int(os.environ.get("ST_SEQUENCES", "15"))
_TMP = Path(tempfile.mkdtemp(prefix="argus-st-"))
# Made when the module is imported (the schema needs an app), so removed when the test
# process exits: a fixture would not run for a run that only collects this module.
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)
APP = create_app(make_config(_TMP), admin_token=ADMIN_TOKEN, heartbeat_s=0.2)
schema = schemathesis.openapi.from_asgi("/schema/openapi.json", APP)
schema.config.seed = SEED
# And a time limit: an answer that takes longer than this fails (in-process, they take ms).
MAX_RESPONSE_S = 5.0
schema.config.checks.update(max_response_time=MAX_RESPONSE_S)
# The event stream never ends on its own (test_sse.py tests it). A task's log here is
# always a 404 (a drawn task id): its parameters and errors are checked.
schema = schema.exclude(path_regex=r"/events$")

_positive = CHECKS.get_one("positive_data_acceptance")
_negative = CHECKS.get_one("negative_data_rejection")
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


def _excluded(case: schemathesis.Case) -> list:
    # tus answers a Tus-Resumable it does not speak with 412, as the protocol says (not
    # among the codes negative_data_rejection expects).
    sent = (case.headers or {}).get("Tus-Resumable")
    if "/uploads" in case.operation.label and sent is not None and sent != "1.0.0":
        return [_positive, _negative]
    if case.operation.label in NOT_DESCRIBABLE:
        return [_positive]
    # A page cursor is opaque: only a next_cursor the server returned is one (anything
    # else is a 400 naming it); no pattern can say which strings those are.
    if "cursor" in (case.query or {}):
        return [_positive]
    return []


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_api_conforms(case: schemathesis.Case) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    # No `checks=`: schemathesis's default set, i.e. every registered check (st run's).
    case.call_and_validate(headers=headers, excluded_checks=_excluded(case))


def test_standard_checks_are_all_on() -> None:
    """The default set the test above runs is every check schemathesis registers (none is
    switched off by a config file), and it holds the ones this API is held to."""
    from schemathesis.checks import load_all_checks

    load_all_checks()
    names = set(CHECKS.get_all_names())
    assert {"not_a_server_error", "status_code_conformance", "content_type_conformance",
            "response_schema_conformance", "response_headers_conformance",
            "negative_data_rejection", "positive_data_acceptance", "missing_required_header",
            "unsupported_method", "allow_header_conformance", "ignored_auth",
            "use_after_free", "ensure_resource_availability"} <= names
    config = schema.config.checks_config_for()
    off = [n for n in names if n != "max_response_time" and not config.get_by_name(name=n).enabled]
    assert off == []
    assert config.max_response_time.enabled and config.max_response_time.limit == MAX_RESPONSE_S
    assert schema.config.seed == SEED


# A followed log of a task that never ends (nothing runs tasks here) would never end.
class _Workflow(schema.exclude(path_regex=r"/logs$").as_state_machine()):  # type: ignore[misc]
    """Sequences of calls along the links schemathesis infers from the document (a user's
    id from POST /users into GET /users/{user_id}, a task's id from POST /tasks into
    cancel, a token's id into its revocation, ...): what the stateful checks need
    (use_after_free, ensure_resource_availability), with the same exclusions as above.
    Each sequence runs against a fresh app: a sequence's outcome must not depend on what
    an earlier one left (hypothesis replays sequences and refuses ones that changed)."""

    def setup(self) -> None:
        self.app = create_app(make_config(Path(tempfile.mkdtemp(dir=_TMP))),
                              admin_token=ADMIN_TOKEN, heartbeat_s=60)

    def teardown(self) -> None:
        super().teardown()
        shutdown_lifespans()  # this sequence's app (and any other started: restarted on use)

    def get_call_kwargs(self, case: schemathesis.Case) -> dict:
        return {"headers": {"Authorization": f"Bearer {ADMIN_TOKEN}"}, "app": self.app}

    def validate_response(self, response, case, additional_checks=None, **kwargs) -> None:  # type: ignore[no-untyped-def]
        case.validate_response(response, additional_checks=additional_checks,
                               excluded_checks=_excluded(case), transport_kwargs=kwargs or None,
                               recorder=self.recorder)


TestStateful = pytest.mark.slow(_Workflow.TestCase)
# derandomize: the same sequences on every run (a state machine takes no @seed).
TestStateful.settings = settings(max_examples=SEQUENCES, stateful_step_count=6, deadline=None,
                                 derandomize=True, database=None,
                                 suppress_health_check=list(HealthCheck))


@pytest.fixture(autouse=True, scope="module")
def _stop_apps() -> Iterator[None]:
    """The apps' lifespans (started by schemathesis, kept for the process) end with this
    module: nothing of theirs runs on in the rest of the session."""
    yield
    shutdown_lifespans()
