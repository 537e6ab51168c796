"""Pulls from below the hot WAL's floor: the unmodified TS client (simulated) and well-behaved
clients converge while the WAL is trimmed under them — entries and delta ids alike.

Pulls, the WebSocket feed and checkpoints are cut from row state, which a trim never touches,
so a cursor below the floor is answered from row state in the same encoding: nothing to
re-bootstrap. The schedules are the convergence suite's (:func:`drive`: lost push responses,
re-pushes, restarts, offline periods, sync rules), on a gateway whose log is flushed and trimmed
to the head at random moments, with every accepted delta id forgotten each time (re-pushes are
then merged again instead of deduplicated).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lakesync_platform.core.delta import RowDelta
from lakesync_platform.core.sync_rules import parse_sync_rules
from lakesync_platform.sync.cursors import split_cursor
from lakesync_platform.sync.service import SyncService
from lakesync_platform.wal.store import WriteAheadLog
from tests.gateway.test_convergence import BASE_MS, RULES, ServiceGateway, drive
from tests.sim import Pushed


class TrimmingGateway(ServiceGateway):
    """The in-process gateway, flushed and trimmed to its head before some requests."""

    def __init__(self, service: SyncService, wal: WriteAheadLog, gw: str, seed: int) -> None:
        super().__init__(service, gw, random.Random(seed), loss=0.1)
        self.wal = wal
        self.trims = random.Random(seed + 1000)
        self.below_floor = 0

    def _maybe_trim(self) -> None:
        if self.trims.random() < 0.15:
            head = self.wal.max_cursor(self.gw)
            self.wal.set_flush_watermark(self.gw, head)  # as a flush does after its commit
            self.wal.trim(self.gw, head, batch=7)
            self.wal.trim_delta_ids(self.gw, 2**62, batch=7)

    def push(self, client_id: str, deltas: Sequence[RowDelta]) -> Pushed:
        self._maybe_trim()
        return super().push(client_id, deltas)

    def pull(
        self, client_id: str, since: int, limit: int, stamped: bool, source: str | None = None
    ) -> tuple[list[dict[str, Any]], int, bool]:
        self._maybe_trim()
        if split_cursor(since)[1] < self.wal.log_floor(self.gw):
            self.below_floor += 1
        return super().pull(client_id, since, limit, stamped, source)


@pytest.mark.parametrize("with_rules", [False, True])
@pytest.mark.parametrize("seed", range(10))
def test_clients_converge_while_the_wal_is_trimmed(
    tmp_path: Path, seed: int, with_rules: bool
) -> None:
    rng = random.Random(seed)
    now = [BASE_MS]
    wal = WriteAheadLog.open(f"sqlite:///{tmp_path / 'wal.db'}")
    try:
        service = SyncService(wal, clock=lambda: now[0])
        rules = parse_sync_rules(RULES) if with_rules else None
        if rules is not None:
            service.save_sync_rules("cold", rules)
        gateway = TrimmingGateway(service, wal, "cold", seed)
        drive(rng, gateway, wal, "cold", rules, now, steps=250)
        assert wal.log_floor("cold") > 0
        assert gateway.below_floor > 0, "no pull started below the floor"
    finally:
        wal.close()
