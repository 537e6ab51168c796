"""Declarative pipeline config: YAML files in a folder (``--defs DIR`` / ``LAKESYNC_DEFS_DIR``).

Every ``*.yaml`` / ``*.yml`` file in the folder (sorted by name) declares, for one gateway::

    gateway: demo                 # gateway id (= lake namespace); default "default"
    tables:                       # table schemas, exactly the admin route's TableSchema JSON
      - table: todos
        columns:
          - {name: title, type: string}
          - {name: done, type: boolean}
        softDelete: true
    destinations:                 # where state is materialised
      - name: warehouse           # identifier; the Dagster asset is <gateway>/<name>/<table>
        kind: postgres            # postgres | mysql | sqlite | bigquery
        url: postgresql+psycopg://app@db:5432/analytics   # ${VAR} is read from the environment
        tables: [todos]           # optional; default: every table of the gateway ("*")
        role: primary             # optional: primary (default; its failure fails the run) or
                                  # best_effort (retried; a failure is reported, the run goes on)
        lifecycle:                # optional: tier rows no run wrote for a while (SQL kinds only)
          to: archive             # a destination of this gateway with role cold
          after: P30D             # ISO 8601 duration since the row's last write (synced_at)
          batch: 5000             # optional: rows moved per transaction
      - name: archive
        kind: postgres
        url: postgresql+psycopg://app@db:5432/archive
        role: cold                # the cold tier: only lifecycle moves write it
      - name: analytics
        kind: bigquery            # credentials: Application Default Credentials
        project: ${GOOGLE_CLOUD_PROJECT}
        dataset: lakesync         # created on first use
        location: EU              # optional; the dataset's location
        endpoint: http://127.0.0.1:9050   # optional: an emulator (anonymous credentials)
    actions:                      # connectors whose actions clients may run (PROTOCOL.md §8)
      - connector: alerts         # the name clients address; an identifier
        kind: webhook             # webhook: POST each action to url
        url: https://hooks.example.com/lakesync   # ${VAR} is read from the environment
        headers: {Authorization: "Bearer ${HOOK_TOKEN}"}   # optional
        timeoutSeconds: 5         # optional (default 5); retries: 2 (default)
        types:                    # the action types, by name
          notify:
            description: Post a message to the team channel
            params:               # optional (absent: any object); each one's JSON type
              text: {type: string}
              urgent: {type: boolean, required: false, description: page the on-call}
      - connector: todo_ops
        kind: sql                 # sql: run a declared statement
        destination: warehouse    # a destination of this gateway (or url: …)
        types:
          close_todo:
            description: Mark a todo done in the warehouse
            statement: UPDATE todos SET completed = TRUE WHERE row_id = :row_id
            params:
              row_id: {type: string}
    sources:                      # stores clients pull from: GET …/pull?source=<name>
      - name: crm                 # identifier, unique per gateway
        kind: postgres            # postgres | mysql | bigquery (holding lakesync_deltas) | lake
        url: postgresql+psycopg://app@db:5432/crm         # ${VAR} is read from the environment
        options: {}               # the kind's own settings (strings; ${VAR} too): lake needs
                                  # warehouse and namespace, its url is the Iceberg catalog's
    syncRules:                    # the gateway's sync rules, exactly the admin route's body
      buckets:
        - {name: mine, tables: [todos], filters: [{column: owner, op: eq, value: "jwt:sub"}]}
    connectors:                   # sources polled into the WAL, exactly the admin route's body
      - name: shop
        type: postgres
        postgres: {connectionString: "postgresql://app:${SHOP_PASSWORD}@db/shop"}
        schedule: "*/5 * * * *"
        ingest:
          tables:
            - {table: items, rowIdColumn: id, strategy: {type: cursor, cursorColumn: updated_at}}

Several files may declare the same gateway; their tables and destinations add up (a table or
destination declared twice is an error). Routing: each destination receives the tables it
lists; a table listed by several destinations fans out to all of them. A gateway with a
``best_effort`` destination must declare a ``primary`` one: a best-effort destination's lag is
measured against the primary destinations covering the same table. A file is read into
msgspec structs, so a misspelt key or a value of the wrong type is refused with the file and
the path of the value (``x.yaml: Object contains unknown field `tabels` - at `$```); the
gateway id follows the platform's rule
(:func:`~lakesync_platform.core.identifiers.check_gateway_id`). Sync rules and connectors
are checked by the admin routes' own parsers
(:func:`~lakesync_platform.core.sync_rules.parse_sync_rules`,
:func:`~lakesync_platform.core.connectors.parse_connector_config`), their messages prefixed
with the file and the path (``x.yaml: … - at `$.connectors[0].ingest.tables[0]```). A
connector's secrets are ``${VAR}`` references, kept as written: they are resolved only by the
process that runs a poll, from its environment.

An action connector's kind, URL or destination, and its types' statements are checked here
(a ``sql`` type needs a ``statement``, a ``webhook`` type has none; a ``destination`` must be
declared for the gateway); the gateway builds the handlers from them at startup.

Declarations are applied to the gateway's config store (:func:`apply_declarations`), which
stays the runtime source of truth: a table registered only through ``POST /v1/admin/schema``
flows through the pipeline like a declared one, and reaches every destination whose ``tables``
is ``"*"``. Declared sync rules are saved exactly as the admin route saves posted ones (the
gateway enforces them within a second); declared connectors are (re-)registered, keeping
their cursors — applying declarations again restores a declared connector's config.
"""

from __future__ import annotations

from .model import (
    ACTION_KINDS,
    DESTINATION_KINDS,
    DESTINATION_ROLES,
    SOURCE_KINDS,
    ActionConnectorDecl,
    ActionTypeDecl,
    DeclarationError,
    Declarations,
    DestinationDecl,
    GatewayDecl,
    LifecycleDecl,
    SourceDecl,
    expand_env,
)
from .parse import apply_declarations, load_declarations, parse_declarations

__all__ = [
    "ACTION_KINDS",
    "DESTINATION_KINDS",
    "DESTINATION_ROLES",
    "SOURCE_KINDS",
    "ActionConnectorDecl",
    "ActionTypeDecl",
    "DeclarationError",
    "Declarations",
    "DestinationDecl",
    "GatewayDecl",
    "LifecycleDecl",
    "SourceDecl",
    "apply_declarations",
    "expand_env",
    "load_declarations",
    "parse_declarations",
]
