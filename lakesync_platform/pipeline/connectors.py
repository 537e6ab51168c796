"""The connectors stage: poll one registered connector once into the WAL.

:func:`run_connector` reads the connector's config from the gateway's config store (declared
in YAML or registered through the admin route), resolves its ``${VAR}`` secrets from the
settings' environment (never logged, never stored), builds its streams — the SQL ``cursor``
strategy on the driver (:mod:`lakesync_platform.connectors.sql.cursor`), the ``diff``
strategy as a Spark job (:mod:`lakesync_platform.spark.connector_diff`), Jira's and
Salesforce's pages fetched over HTTP on the driver (:mod:`lakesync_platform.connectors.jira`,
:mod:`~lakesync_platform.connectors.salesforce`) with their delete census compared as a Spark
job (:mod:`lakesync_platform.spark.connector_census`) — and runs them with
:func:`~lakesync_platform.connectors.runner.run_streams`, appending through
:meth:`SyncService.append <lakesync_platform.sync.service.SyncService.append>`: the same
validation, merge and commit as a client's push, as client ``ingest:<connector>``. Tables an
HTTP source fills are registered (and widened when the source grows a field) through
:meth:`SyncService.save_schema <lakesync_platform.sync.service.SyncService.save_schema>`.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import msgspec
from croniter import croniter

from ..connectors.census import CensusComparison, CensusDiffer, CensusStream
from ..connectors.http import SessionFactory, session_factory
from ..connectors.jira.source import JiraSource
from ..connectors.model import Change, Page, RunReport, Stream
from ..connectors.runner import run_streams
from ..connectors.salesforce.auth import SalesforceSecrets
from ..connectors.salesforce.source import SalesforceSource
from ..connectors.sql.cursor import SqlCursorStream, source_engine, sqlalchemy_url
from ..core.connectors import (
    DEFAULT_CHUNK_SIZE,
    HTTP_TYPES,
    SQL_TYPES,
    ConnectorConfig,
    CursorStrategy,
    jira_options,
    resolve_secrets,
    salesforce_options,
)
from ..core.errors import NotFoundError, ValidationError
from ..core.schema import TableSchema, with_columns
from ..spark.connector_census import IdCensus
from ..spark.connector_diff import SnapshotDiff
from ..spark.wal_source import jdbc_source
from ..sync.service import SyncService
from .context import CheckOutcome, PipelineContext

__all__ = [
    "DiffStream",
    "SparkCensus",
    "check_census",
    "connector_config",
    "due_tick",
    "ensure_columns",
    "registered_connectors",
    "run_connector",
]


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class DiffStream:
    """A ``diff``-strategy table as a stream: the diff's changes in pages, then an empty page
    whose commit promotes the staged snapshot."""

    diff: SnapshotDiff
    page_size: int = 500

    @property
    def name(self) -> str:
        """State key: the gateway table."""
        return self.diff.spec.table

    @property
    def table(self) -> str:
        """The gateway table written."""
        return self.diff.spec.table

    def pages(self, state: Mapping[str, Any]) -> Iterator[Page]:
        """Stage the source, stream its differences, promote it once they are committed."""
        rows = self.diff.stage()
        page: list[Change] = []
        for row_id, row in self.diff.changes(rows):
            page.append(Change(row_id, row))
            if len(page) >= self.page_size:
                yield Page(page, api_calls=0)
                page = []
        if page:
            yield Page(page)
        yield Page([], {"snapshotRows": rows}, after_commit=self.diff.promote, api_calls=1)


def registered_connectors(ctx: PipelineContext) -> list[tuple[str, ConnectorConfig]]:
    """Every registered connector of every gateway as ``(gw, config)`` (declarations applied
    first, so declared connectors are registered)."""
    ctx.apply_declarations()
    return [(gw, cfg) for gw in ctx.gateways() for cfg in ctx.wal.connectors(gw).values()]


def due_tick(cron: str, after_s: float, now_s: float) -> int | None:
    """The latest tick of ``cron`` (UTC) in ``(after_s, now_s]`` as epoch seconds, or ``None``
    when none fell in that window."""
    start = dt.datetime.fromtimestamp(now_s, dt.UTC)
    previous = croniter(cron, start + dt.timedelta(seconds=1)).get_prev(float)
    return int(previous) if after_s < previous <= now_s else None


def connector_config(ctx: PipelineContext, gw: str, name: str) -> ConnectorConfig:
    """The registered config of ``name`` (declarations applied first)."""
    ctx.apply_declarations()
    found = ctx.wal.connectors(gw).get(name)
    if found is None:
        raise NotFoundError(f'Connector "{name}" is not registered for gateway "{gw}"')
    return found


@dataclass
class SparkCensus:
    """The Spark census (:class:`~lakesync_platform.spark.connector_census.IdCensus`) as a
    :class:`~lakesync_platform.connectors.census.CensusDiffer`."""

    census: IdCensus

    def stage(self, ids: Iterable[tuple[str, str]]) -> int:
        """Stage the sweep."""
        return self.census.stage(ids)

    def compare(self) -> CensusComparison:
        """Compare it with the known ids."""
        found = self.census.compare()
        return CensusComparison(found.vanished, found.known, found.missing, found.missing_sample)

    def promote(self) -> None:
        """Keep the sweep as the known ids."""
        self.census.promote()


def ensure_columns(service: SyncService, gw: str, wanted: TableSchema) -> None:
    """Register ``wanted``'s table, or add the columns it lacks (additive evolution: a field
    that appeared at the source becomes a column); a table that has them all is left alone."""
    widened = with_columns(service.config(gw).schemas.get(wanted.table), wanted)
    if widened is not None:
        service.save_schema(gw, widened)


@dataclass
class _LakeHold:
    """The lake's lock (:mod:`.lock`) for the rest of a connector's run, taken the first time
    the run needs the lake: before a ``diff`` stream's staging table is recovered or written,
    before a census compares its ids. It keeps two runs of one connector from taking each
    other's staging table for a dead run's (:mod:`lakesync_platform.spark.staged`), and the
    run's Iceberg commits from colliding with a stage's on the embedded catalog. Polls that
    need no lake (``cursor`` tables, incremental HTTP pages) never wait for it."""

    ctx: PipelineContext
    gw: str
    stage: str
    stack: ExitStack
    held: bool = False

    def __call__(self) -> None:
        if not self.held:
            self.stack.enter_context(self.ctx.exclusive(self.stage, self.gw))
            self.held = True


@dataclass
class _Polled:
    """A connector's streams for one run, and what the run's report learns from its source."""

    streams: list[Stream]
    finish: Callable[[RunReport], None] = lambda report: None


def _secret(value: str | None, env: Mapping[str, str]) -> str | None:
    return None if value is None else resolve_secrets(value, env)


def _http_source(
    ctx: PipelineContext,
    gw: str,
    cfg: ConnectorConfig,
    stack: ExitStack,
    lake: _LakeHold,
    *,
    clock: Callable[[], int],
    head: int,
    sessions: SessionFactory,
) -> _Polled:
    """The streams of a Jira or Salesforce connector (its census compared by Spark)."""
    env = ctx.settings.env

    def differ() -> CensusDiffer:
        lake()
        wal = jdbc_source(ctx.wal.url)
        return SparkCensus(IdCensus(ctx.spark, ctx.lake_catalog, gw, cfg.name, wal, head))

    census: CensusStream | None = None
    if cfg.type == "jira":
        jira = jira_options(cfg)
        if jira.base_url:
            jira = msgspec.structs.replace(jira, base_url=resolve_secrets(jira.base_url, env))
        source = JiraSource(jira, resolve_secrets(jira.api_token, env), sessions, clock=clock)
        stack.callback(source.close)
        streams = source.streams()
        if jira.census_every > 0:
            census = source.census_stream(differ)
            streams.append(census)
        return _Polled(streams, lambda report: _finish(report, census, None))
    sf = salesforce_options(cfg)
    sf = msgspec.structs.replace(
        sf,
        instance_url=resolve_secrets(sf.instance_url, env),
        login_url=_secret(sf.login_url, env),
    )
    secrets = SalesforceSecrets(
        _secret(sf.client_secret, env), _secret(sf.password, env), _secret(sf.refresh_token, env)
    )
    org = SalesforceSource(sf, secrets, sessions, clock=clock)
    stack.callback(org.close)
    streams = org.streams()
    if sf.census_every > 0:
        census = org.census_stream(differ)
        streams.append(census)
    return _Polled(streams, lambda report: _finish(report, census, org))


def _finish(report: RunReport, census: CensusStream | None, org: SalesforceSource | None) -> None:
    if census is not None:
        report.census = census.outcome
    if org is not None:
        report.quota = org.quota.report()
        report.stopped = org.stopped


def _sql_source(
    ctx: PipelineContext, gw: str, cfg: ConnectorConfig, stack: ExitStack, lake: _LakeHold
) -> _Polled:
    """The streams of a SQL connector (``cursor`` on the driver, ``diff`` in Spark)."""
    if cfg.ingest is None:
        raise ValidationError(f'Connector "{cfg.name}" has no ingest.tables to poll')
    url = resolve_secrets(str(cfg.source["connectionString"]), ctx.settings.env)
    chunk = cfg.ingest.chunk_size
    streams: list[Stream] = []
    engine = None
    for spec in cfg.ingest.tables:
        if isinstance(spec.strategy, CursorStrategy):
            if engine is None:
                engine = source_engine(url)
                stack.callback(engine.dispose)
            streams.append(SqlCursorStream(spec, engine, page_size=chunk))
        else:
            lake()
            diff = SnapshotDiff(
                ctx.spark, ctx.lake_catalog, jdbc_source(sqlalchemy_url(url)), spec, gw, cfg.name
            )
            streams.append(DiffStream(diff, page_size=chunk))
    return _Polled(streams)


def run_connector(
    ctx: PipelineContext,
    gw: str,
    name: str,
    *,
    clock: Callable[[], int] = _wall_ms,
    sessions: SessionFactory | None = None,
) -> RunReport:
    """Poll connector ``name`` of ``gw`` once; raises on any failure (state then stays at the
    last committed page). ``sessions`` makes the HTTP sources' sessions (default: the
    standard retries and timeouts)."""
    cfg = connector_config(ctx, gw, name)
    service = SyncService(ctx.wal, clock)
    head = service.head(gw)  # before any poll: the census's known ids are complete up to here
    with ExitStack() as stack:
        lake = _LakeHold(ctx, gw, f"connector {cfg.name}", stack)
        if cfg.type in SQL_TYPES:
            polled = _sql_source(ctx, gw, cfg, stack, lake)
        elif cfg.type in ("jira", "salesforce"):
            make = sessions or session_factory()
            polled = _http_source(ctx, gw, cfg, stack, lake, clock=clock, head=head, sessions=make)
        else:
            raise ValidationError(f'Connector type "{cfg.type}" is not polled (a pull source)')
        report = run_streams(
            polled.streams,
            gw=gw,
            connector=cfg.name,
            append=lambda deltas: service.append(gw, cfg.name, deltas),
            store=ctx.wal,
            clock=clock,
            chunk_size=cfg.ingest.chunk_size if cfg.ingest else DEFAULT_CHUNK_SIZE,
            ensure_schema=lambda schema: ensure_columns(service, gw, schema),
        )
        polled.finish(report)
    return report


def check_census(cfg: ConnectorConfig, report: RunReport) -> CheckOutcome:
    """The last delete census ran when due and found the ids consistent: every id at the
    source was one the WAL had received (the incremental polls miss nothing), and what
    vanished was deleted. Before the first census is due, and for connectors without one
    (SQL sources, ``censusEvery: 0``), it passes saying so."""
    census = report.census
    if cfg.type not in HTTP_TYPES or census is None or not census.get("every"):
        return CheckOutcome(True, "this connector takes no delete census", {"applies": False})
    every, last = int(census["every"]), census.get("last")
    since = census.get("runsSince")
    meta: dict[str, Any] = {
        "every": every,
        "runs_since": since,
        "ran_this_run": census["ranThisRun"],
    }
    if census.get("skipped"):
        meta["skipped"] = census["skipped"]
    if last is None:
        runs = int(census.get("runs", 0))
        ok = runs < every
        text = f"first census due in {every - runs} run(s)" if ok else "the first census is overdue"
        return CheckOutcome(ok, text, meta)
    meta.update(
        source_ids=last["sourceIds"],
        known_ids=last["knownIds"],
        vanished=last["vanished"],
        missing=last["missing"],
    )
    if since is not None and since >= every:
        return CheckOutcome(False, f"the census is overdue: it last ran {since} runs ago", meta)
    if not last["consistent"]:
        sample = ", ".join(f"{t}/{r}" for t, r in last["missingSample"])
        text = f"{last['missing']} id(s) at the source never reached the WAL (e.g. {sample})"
        return CheckOutcome(False, text, meta)
    return CheckOutcome(
        True,
        f"census of run {last['run']}: {last['sourceIds']} ids at the source, "
        f"{last['vanished']} vanished and deleted, none missing",
        meta,
    )
