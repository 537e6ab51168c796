"""Recorded-shape fakes of the external APIs the connectors talk to (a testing kit, like
:mod:`lakesync_platform.testing`): local HTTP servers on real sockets.

* :mod:`.server` — :class:`~.server.FakeServer`: a threaded HTTP/1.1 server on a free loopback
  port, routes as data, calls counted per route, faults injected on demand (a 429 with
  ``Retry-After``, a 5xx, a dropped token).
* :mod:`.jira` — :class:`~.jira.FakeJira`: Jira Cloud's REST API v3 (``/search/jql`` with
  ``nextPageToken``, comments, projects, fields, ``/myself``, creating issues and comments) over
  issues it holds and changes as a test tells it to.
* :mod:`.salesforce` — :class:`~.salesforce.FakeSalesforce`: the OAuth token endpoint (password,
  client-credentials and refresh-token flows), ``describe``, ``query``/``queryAll`` with
  ``nextRecordsUrl`` and ``IsDeleted``, ``Sforce-Limit-Info``, ``/limits``, the Bulk API 2.0
  query job flow, and creating and updating records.

The tests and the benchmarks use them (``python -m lakesync_platform.fakes`` serves one with
generated records in a process of its own); nothing else in the package imports them. The
shapes follow Atlassian's and Salesforce's published REST references; only what the connectors
use is answered, and anything else is a 404 or the API's own error shape.
"""
