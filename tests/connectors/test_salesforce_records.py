"""Salesforce describe → columns, record → row (REST and Bulk API 2.0 CSV alike), SOQL and the
quota header, as pure functions on records in the shapes Salesforce's REST API answers with."""

from __future__ import annotations

import csv
import io
from typing import Any

from lakesync_platform.connectors.salesforce.records import (
    count_soql,
    csv_change,
    describe_fields,
    ids_soql,
    next_cursor,
    object_schema,
    parse_limit_info,
    poll_soql,
    record_change,
    snake,
)

DESCRIBE: dict[str, Any] = {
    "name": "Account",
    "fields": [
        {"name": "Id", "type": "id", "compoundFieldName": None},
        {"name": "IsDeleted", "type": "boolean"},
        {"name": "Name", "type": "string"},
        {"name": "BillingCity", "type": "string", "compoundFieldName": "BillingAddress"},
        {"name": "BillingAddress", "type": "address"},
        {"name": "AnnualRevenue", "type": "currency"},
        {"name": "NumberOfEmployees", "type": "int"},
        {"name": "IsPartner", "type": "boolean"},
        {"name": "OwnerId", "type": "reference", "relationshipName": "Owner"},
        {"name": "Logo__c", "type": "base64"},
        {"name": "SLAExpirationDate__c", "type": "date"},
        {"name": "SystemModstamp", "type": "datetime"},
    ],
}
RECORD: dict[str, Any] = {
    "attributes": {
        "type": "Account",
        "url": "/services/data/v62.0/sobjects/Account/001Dn00000ABCDEIA5",
    },
    "Id": "001Dn00000ABCDEIA5",
    "IsDeleted": False,
    "Name": "Acme",
    "BillingCity": "Berlin",
    "AnnualRevenue": 1250000.5,
    "NumberOfEmployees": 42,
    "IsPartner": True,
    "OwnerId": "005Dn000001XyZQIA0",
    "Owner": {"attributes": {"type": "User"}, "Name": "Ada Lovelace"},
    "SLAExpirationDate__c": None,
    "SystemModstamp": "2026-01-15T10:30:00.000+0000",
}


def test_columns_follow_the_describe_with_the_references_names() -> None:
    fields = describe_fields(DESCRIBE)
    assert [(f.api_name, f.column, f.type) for f in fields] == [
        ("Id", "sf_id", "string"),
        ("Name", "name", "string"),
        ("BillingCity", "billing_city", "string"),
        ("AnnualRevenue", "annual_revenue", "number"),
        ("NumberOfEmployees", "number_of_employees", "number"),
        ("IsPartner", "is_partner", "boolean"),
        ("OwnerId", "owner_id", "string"),
        ("Owner.Name", "owner_name", "string"),
        ("SLAExpirationDate__c", "sla_expiration_date__c", "string"),
        ("SystemModstamp", "system_modstamp", "string"),
    ]  # no compound address, no file body, IsDeleted makes deletes
    assert object_schema("sf_accounts", fields).column_names[0] == "sf_id"
    assert snake("Account.Name") == "account_name" and snake("IsWon") == "is_won"


def test_a_rest_record_and_its_bulk_csv_row_are_the_same_row() -> None:
    fields = describe_fields(DESCRIBE)
    rest = record_change(RECORD, fields)
    assert rest.row_id == "001Dn00000ABCDEIA5"
    assert rest.row == {
        "sf_id": "001Dn00000ABCDEIA5",
        "name": "Acme",
        "billing_city": "Berlin",
        "annual_revenue": 1250000.5,
        "number_of_employees": 42,
        "is_partner": True,
        "owner_id": "005Dn000001XyZQIA0",
        "owner_name": "Ada Lovelace",
        "sla_expiration_date__c": None,
        "system_modstamp": "2026-01-15T10:30:00.000+0000",
    }
    text = (
        "Id,Name,BillingCity,AnnualRevenue,NumberOfEmployees,IsPartner,OwnerId,Owner.Name,"
        "SLAExpirationDate__c,SystemModstamp,IsDeleted\n"
        "001Dn00000ABCDEIA5,Acme,Berlin,1250000.5,42,true,005Dn000001XyZQIA0,Ada Lovelace,,"
        "2026-01-15T10:30:00.000Z,false\n"
    )
    [row] = list(csv.DictReader(io.StringIO(text)))
    assert csv_change(row, fields) == rest


def test_a_deleted_record_is_a_delete_either_way() -> None:
    fields = describe_fields(DESCRIBE)
    gone = record_change({**RECORD, "IsDeleted": True}, fields)
    assert (gone.row_id, gone.row) == ("001Dn00000ABCDEIA5", None)
    assert csv_change({"Id": "001X", "IsDeleted": "true"}, fields).row is None


def test_the_soql_of_a_poll_reads_from_the_cursor_minus_the_lookback() -> None:
    fields = describe_fields({"fields": [{"name": "Id", "type": "id"}, {"name": "Name"}]})
    assert poll_soql("Lead", fields, {}, 60_000, None) == (
        "SELECT Id, Name, IsDeleted FROM Lead ORDER BY SystemModstamp ASC, Id ASC"
    )
    state = {"SystemModstamp": "2026-01-15T10:30:00.000+00:00"}
    assert poll_soql("Lead", fields, state, 60_000, "Status = 'Open'") == (
        "SELECT Id, Name, IsDeleted FROM Lead WHERE SystemModstamp >= 2026-01-15T10:29:00.000Z "
        "AND (Status = 'Open') ORDER BY SystemModstamp ASC, Id ASC"
    )
    assert count_soql("Lead", None) == "SELECT COUNT() FROM Lead"
    assert ids_soql("Lead", "Status = 'Open'") == "SELECT Id FROM Lead WHERE (Status = 'Open')"


def test_the_cursor_and_the_quota_header() -> None:
    stamps = ["2026-01-15T10:30:00.000+0000", "2026-01-15T12:00:00.500Z", None]
    assert next_cursor({}, stamps) == {"SystemModstamp": "2026-01-15T12:00:00.500+00:00"}
    assert parse_limit_info("api-usage=25/15000") == (25, 15000)
    assert parse_limit_info("api-usage=18/5000; per-app-api-usage=17/250(appName=x)") == (18, 5000)
    assert parse_limit_info(None) is None and parse_limit_info("nonsense") is None
