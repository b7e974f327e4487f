"""The served OpenAPI document against the app's behaviour (in-process ASGI), with
schemathesis's standard checks, the ones ``st run`` uses: no 5xx; documented status codes,
content types, headers and bodies; schema-valid requests accepted and schema-violating ones
refused; undeclared methods a 405 with a correct ``Allow``; a missing required header
refused; authentication enforced where declared. Every phase the pytest integration runs
(explicit examples, coverage, fuzzing), positive and negative data.

The deeper run, against a real ``argus serve`` with ``st run`` at 100 examples per
operation, is scripts/test-api-contract.sh.

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
from tests.api.contract_rules import excluded

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


def _excluded(case: schemathesis.Case) -> list:
    """The built-in checks left out for this case: tests/api/contract_rules.py says which
    and why (the same list scripts/test-api-contract.sh uses)."""
    return [CHECKS.get_one(name) for name in excluded(case)]


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
