"""The OpenAPI document is the contract: schemathesis fuzzes a real gateway against it.

Schemathesis loads the document the gateway generates (the one a gateway process serves at
``/v1/openapi.json``, checked below; it is loaded at collection time, so there is one test per
operation), generates requests for every operation — schema-valid and schema-violating ones, the
coverage phase's boundary values and undeclared methods — derandomized, with a bounded number
of examples, sends them to a real gateway process (``lakesync gateway`` on a free loopback port)
with real tokens of one gateway id, and runs every check on every response. Zero failures, zero
server errors.

Where protocol v1 and a check disagree, the check is configured here with the reason beside it.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from schemathesis import Case
from schemathesis.config import SchemathesisConfig

from gateway.app import create_app
from lakesync_platform.settings import GatewaySettings
from lakesync_platform.testing import GatewayProcess, dev_token
from tests.helpers import SECRET

pytestmark = pytest.mark.slow

GW = "contract"
CLIENT = "c1"
MAX_EXAMPLES = 100
# The statuses schemathesis expects by default for schema-valid and schema-violating requests;
# the run adds to them below, each with its reason.
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]
REJECTED = ["400", "401", "403", "404", "405", "406", "409", "415", "422", "428", "429", "5xx"]


def _bearer(sub: str, role: str = "client") -> dict[str, str]:
    return {"Authorization": f"Bearer {dev_token(sub, GW, SECRET, role)}"}


def contract_config() -> dict[str, Any]:
    """The schemathesis configuration of the run (``schemathesis.toml`` as a dict)."""
    return {
        # Derandomized: the same requests on every run (Hypothesis' derandomize; no database).
        "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none"},
        # Every request names the gateway the tokens are for (any other valid id is a 403).
        "parameters": {"path.gw": GW},
        "checks": {
            # A body over 1 MiB is answered 413 before it is parsed (PROTOCOL.md §4.2); the
            # coverage phase builds one when it exceeds the push's maxItems of 10 000.
            "negative_data_rejection": {"expected-statuses": [*REJECTED, "413"]},
        },
        "operations": [
            # The admin token of the gateway for the admin routes ...
            {"include-tag": "admin", "headers": _bearer("admin", "admin")},
            # ... the client token for pull and checkpoint, pulling as the token's subject ...
            {
                "include-operation-id": "pull",
                "headers": _bearer(CLIENT),
                "parameters": {"query.clientId": CLIENT},
                "checks": {
                    # Protocol v1 reads `since` as JavaScript's BigInt() and `limit` as
                    # parseInt() (PROTOCOL.md §4.2-4.3): " 12 ", "0x1f", "-1" and "" are
                    # cursors, "10abc" is a limit of 10 — answered 200, as the reference does.
                    "negative_data_rejection": {"enabled": False},
                },
            },
            {"include-operation-id": "checkpoint", "headers": _bearer(CLIENT)},
            # ... and for push an admin token, which may push for any client id (a client
            # token may push only as itself: generated client ids would all be 403s).
            {
                "include-operation-id": "push",
                "headers": _bearer("admin", "admin"),
                "checks": {
                    # Rules a JSON Schema cannot state, answered as protocol v1 answers them:
                    # a column named twice in one delta (400), a delta that breaks the table's
                    # registered schema (422; the admin schema route registers random ones),
                    # a body over 1 MiB (413; 10 000 deltas of the coverage phase are 1.2 MiB).
                    "positive_data_acceptance": {
                        "expected-statuses": [*ACCEPTED, "400", "413", "422"]
                    },
                },
            },
            # Actions as an admin, who may send them for any client id; discovery as a client.
            {
                "include-operation-id": "action",
                "headers": _bearer("admin", "admin"),
                "checks": {
                    # Every action's clientId must be the request's (PROTOCOL.md §8 shapes): a
                    # rule across fields a JSON Schema cannot state, answered 400.
                    "positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]},
                },
            },
            {"include-operation-id": "describe_actions", "headers": _bearer(CLIENT)},
            {
                "include-operation-id": "save_schema",
                "checks": {
                    # Cross-field rules (PROTOCOL.md §9): unique column names, primaryKey and
                    # externalIdColumn naming declared columns, additive evolution only: 400.
                    "positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]},
                },
            },
            {
                "include-operation-id": "register_connector",
                "checks": {
                    # Rules of PROTOCOL.md §11.1 a JSON Schema does not state: the `<type>`
                    # object and its required fields, secrets only as ${VAR} references, the
                    # ingest plan of SQL types, a cron schedule: 400.
                    "positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]},
                },
            },
            {
                "include-operation-id": "save_sync_rules",
                "checks": {
                    # Bucket names are unique (PROTOCOL.md §5): a repeated one is a 400.
                    "positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]},
                },
            },
        ],
    }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A real gateway process with auth on."""
    with GatewayProcess(tmp_path_factory.mktemp("contract"), SECRET) as proc:
        yield proc


def generated_document() -> dict[str, Any]:
    """The document Litestar generates from the controllers (the app is built, not started)."""
    app = create_app(GatewaySettings(wal_url="sqlite://", jwt_secrets=(SECRET,)))
    document: dict[str, Any] = app.app.openapi_schema.to_schema()
    return document


schema = schemathesis.openapi.from_dict(
    generated_document(), config=SchemathesisConfig.from_dict(contract_config())
)


def test_the_gateway_serves_the_generated_document(gateway: GatewayProcess) -> None:
    status, body = gateway.request("GET", "/v1/openapi.json")
    assert status == 200
    assert json.loads(body) == generated_document()


@schema.parametrize()
def test_gateway_keeps_its_openapi_contract(case: Case, gateway: GatewayProcess) -> None:
    """Every check schemathesis has, on every response (one test per operation)."""
    case.call_and_validate(base_url=gateway.url)


def test_pull_from_a_cursor_no_gateway_mints_starts_over(gateway: GatewayProcess) -> None:
    """Found by the contract run: a ``since`` above what a SQL BIGINT holds was a 500."""
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
    try:
        conn.request(
            "GET",
            f"/v1/sync/{GW}/pull?since=18446744073709550790&clientId={CLIENT}",
            headers=_bearer(CLIENT),
        )
        resp = conn.getresponse()
        assert resp.status == 200
        assert isinstance(json.loads(resp.read())["deltas"], list)
    finally:
        conn.close()
