"""Source connectors: data no client writes, polled and appended to the WAL.

* :mod:`.model` — a stream as data: what it is called, which table it fills, and its pages of
  changes, each with the state (cursor) that holds once the page is committed;
* :mod:`.records` — record → row clean-up as pure functions;
* :mod:`.runner` — :func:`~.runner.run_streams`: changes in chunks into the WAL through an
  injected append, each stream's state saved only after the WAL committed what it covers;
* :mod:`.http` — the retrying ``requests`` session HTTP sources are given, and declarative
  REST endpoints;
* :mod:`.census` — the delete census: an id sweep compared with the ids the WAL was given;
* :mod:`.sql` — SQL sources (Postgres, MySQL/MariaDB): the ``cursor`` strategy;
* :mod:`.jira` and :mod:`.salesforce` — Jira Cloud and Salesforce: endpoints as data, pure
  record mappings, their streams, and their actions;
* :mod:`.actions` — the action handlers of registered Jira and Salesforce connectors;
* :mod:`.webhook` — the ``webhook`` action handler.

Nothing here reaches the WAL or Spark itself: the pipeline composes (:mod:`lakesync_platform.
pipeline.connectors`).
"""
