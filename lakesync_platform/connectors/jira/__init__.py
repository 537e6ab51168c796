"""Jira Cloud: issues, their comments and projects, polled into ``jira_issues``,
``jira_comments`` and ``jira_projects`` (PROTOCOL.md §11.3), and actions that create issues
and add comments.

* :mod:`.settings` — the endpoints, fields, tables and columns, declared as data;
* :mod:`.records` — record → row mapping and the JQL of a poll, as pure functions;
* :mod:`.source` — the streams of a poll (issues with their comments, projects, the census);
* :mod:`.actions` — the action handler.
"""
