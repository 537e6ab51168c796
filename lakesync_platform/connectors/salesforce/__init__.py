"""Salesforce: sObjects (Account, Contact, Opportunity and Lead by default, and any named in
the config) polled into ``sf_<object>`` tables, deletes included, within an API-quota budget;
and actions that create and update records.

* :mod:`.settings` — API paths, field types, the reference's relationship columns, as data;
* :mod:`.records` — describe → columns, record → row, SOQL, quota headers: pure functions;
* :mod:`.auth` — the OAuth flows (password, client credentials, refresh token);
* :mod:`.bulk` — the Bulk API 2.0 query job flow (first loads of large objects);
* :mod:`.source` — the streams of a poll (one per sObject, the census) and the quota budget;
* :mod:`.actions` — the action handler.
"""
