"""Property-based checks against the served OpenAPI (in-process ASGI): no 5xx, and
responses match the schema. Bounded: a few examples per operation."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from argus.api.app import create_app
from tests.api.conftest import ADMIN_TOKEN, make_config

from schemathesis.checks import (
    content_type_conformance, not_a_server_error, response_headers_conformance,
    response_schema_conformance, status_code_conformance,
)

# What the API promises: no 5xx, documented status codes and content types, bodies that
# match the schema. (Whether every schema-valid body is accepted is not promised: the
# TaskSpec is checked beyond what the schema can say.)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance]
_TMP = Path(tempfile.mkdtemp(prefix="argus-st-"))
APP = create_app(make_config(_TMP), admin_token=ADMIN_TOKEN, heartbeat_s=0.2)
schema = schemathesis.openapi.from_asgi("/schema/openapi.json", APP)
# Streams never end on their own; they are tested in test_sse.py.
schema = schema.exclude(path_regex=r"/(events|logs)$")


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_api_conforms(case: schemathesis.Case) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    case.call_and_validate(headers=headers, checks=CHECKS)
