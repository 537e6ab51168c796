"""Connector configs: validation names the path and the problem; secrets are references only
and masked when shown."""

from __future__ import annotations

from typing import Any

import pytest

from lakesync_platform.core.connectors import (
    MASK,
    connector_config_to_json,
    masked_connector_json,
    parse_connector_config,
    resolve_secrets,
)
from lakesync_platform.core.errors import ValidationError

PG: dict[str, Any] = {
    "name": "crm",
    "type": "postgres",
    "postgres": {"connectionString": "postgresql://app:${CRM_PW}@db:5432/crm"},
    "ingest": {
        "tables": [
            {
                "table": "customers",
                "strategy": {"type": "cursor", "cursorColumn": "updated_at"},
            },
            {"table": "orders", "query": "SELECT * FROM o", "strategy": {"type": "diff"}},
        ]
    },
}


def test_a_valid_config_round_trips_and_masks_its_password() -> None:
    cfg = parse_connector_config(PG)
    assert parse_connector_config(connector_config_to_json(cfg)) == cfg
    assert cfg.client_id == "ingest:crm" and cfg.ingest is not None
    assert cfg.ingest.chunk_size == 500 and cfg.ingest.tables[0].strategy.lookback_ms == 5000  # type: ignore[union-attr]
    shown = masked_connector_json(cfg)
    assert shown["postgres"]["connectionString"] == f"postgresql://app:{MASK}@db:5432/crm"
    jira = parse_connector_config(
        {"name": "j", "type": "jira", "jira": {"domain": "a", "email": "e", "apiToken": "${T}"}}
    )
    assert masked_connector_json(jira)["jira"]["apiToken"] == MASK
    assert resolve_secrets("x${CRM_PW}y", {"CRM_PW": "s3"}) == "xs3y"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"type": "oracle"},
            "type must be one of postgres, mysql, bigquery, jira, salesforce - at `$.type`",
        ),
        ({"name": "bad-name"}, "Invalid SQL identifier"),
        (
            {"postgres": None},
            'Connector type "postgres" requires a postgres config - at `$.postgres`',
        ),
        (
            {"postgres": {}},
            "connectionString is required (a non-empty string) - at `$.postgres.connectionString`",
        ),
        (
            {"postgres": {"connectionString": "postgresql://app:hunter2@db/crm"}},
            "the password in connectionString must be a ${VAR} reference"
            " - at `$.postgres.connectionString`",
        ),
        ({"ingest": None}, "a postgres connector needs ingest.tables to poll - at `$.ingest`"),
        (
            {"ingest": {"tables": []}},
            "ingest.tables must list at least one table - at `$.ingest.tables`",
        ),
        (
            {"ingest": {"tables": [{"table": "t", "strategy": {"type": "cursor"}}]}},
            "Object missing required field `cursorColumn` - at `$.ingest.tables[0].strategy`",
        ),
        ({"ingest": {"tables": [{"table": "t"}]}}, "missing required field `strategy`"),
        ({"schedule": "every minute"}, "must be a cron expression of 5 fields - at `$.schedule`"),
        (
            {"ingest": {"chunkSize": 0, "tables": PG["ingest"]["tables"]}},
            "chunkSize must be a positive integer",
        ),
        ({"extra": 1}, "unknown field(s) ['extra'] - at `$`"),
    ],
)
def test_a_bad_config_names_the_path_and_the_problem(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_connector_config({**PG, **change})
    assert message in err.value.message


def test_secret_fields_must_be_references() -> None:
    with pytest.raises(ValidationError, match=r"apiToken must be a \$\{VAR\} reference"):
        parse_connector_config(
            {"name": "j", "type": "jira", "jira": {"domain": "a", "email": "e", "apiToken": "tok"}}
        )
    with pytest.raises(ValidationError, match="environment variable NOPE is not set"):
        resolve_secrets("${NOPE}", {})


JIRA: dict[str, Any] = {"domain": "acme", "email": "bot@acme.io", "apiToken": "${JIRA_TOKEN}"}
SF: dict[str, Any] = {
    "instanceUrl": "https://acme.my.salesforce.com",
    "clientId": "3MVG9",
    "clientSecret": "${SF_SECRET}",
    "username": "bot@acme.io",
    "password": "${SF_PASSWORD}",
}


NO_PASSWORD = {k: v for k, v in SF.items() if k != "password"}
BAD_HTTP_OPTIONS: list[tuple[str, dict[str, Any], str]] = [
    ("jira", {"jql": "project = X ORDER BY key"}, "leave ORDER BY out (polls order by updated)"),
    ("jira", {"pageSize": 500}, "pageSize must be between 1 and 100 - at `$.jira.pageSize`"),
    ("jira", {"censusEvery": -1}, "censusEvery must be 0 or more - at `$.jira.censusEvery`"),
    ("jira", {"jqll": "x"}, "Object contains unknown field `jqll` - at `$.jira`"),
    ("jira", {"customFields": "all"}, "Expected `array | null`, got `str` - at `$.jira.custom"),
    ("salesforce", {"authFlow": "magic"}, "authFlow must be one of password, client_credentials"),
    ("salesforce", {"authFlow": "refresh_token"}, "refreshToken is required (a non-empty string)"),
    ("salesforce", {"refreshToken": "5Aep"}, "refreshToken must be a ${VAR} reference"),
    ("salesforce", {"quotaShare": 1.5}, "quotaShare must be more than 0 and at most 1"),
    ("salesforce", {"objects": ["Account", "A B"]}, "'A B' is not an sObject API name - at `$.sal"),
    ("salesforce", {"objects": ["Account", {"name": "L", "table": "sf_accounts"}]}, "polled twice"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "change", "message"), BAD_HTTP_OPTIONS)
def test_bad_jira_and_salesforce_options_name_the_path(
    kind: str, change: dict[str, Any], message: str
) -> None:
    options = {**(JIRA if kind == "jira" else SF), **change}
    with pytest.raises(ValidationError) as err:
        parse_connector_config({"name": "src", "type": kind, kind: options})
    assert message in err.value.message
    with pytest.raises(ValidationError) as err:
        parse_connector_config({"name": "src", "type": "salesforce", "salesforce": NO_PASSWORD})
    assert err.value.message == (
        "password is required (a non-empty string) - at `$.salesforce.password`"
    )


def test_salesforce_flows_need_only_their_own_secrets() -> None:
    creds = {"instanceUrl": "https://acme.my.salesforce.com", "clientId": "3MVG9"}
    for flow, extra in [
        ("client_credentials", {"clientSecret": "${S}"}),
        ("refresh_token", {"refreshToken": "${R}"}),
    ]:
        cfg = parse_connector_config(
            {
                "name": "crm",
                "type": "salesforce",
                "salesforce": {**creds, "authFlow": flow, **extra},
            }
        )
        assert masked_connector_json(cfg)["salesforce"].get("refreshToken") in (None, MASK)
    cfg = parse_connector_config({"name": "crm", "type": "salesforce", "salesforce": SF})
    shown = masked_connector_json(cfg)["salesforce"]
    assert (shown["clientSecret"], shown["password"]) == (MASK, MASK)
