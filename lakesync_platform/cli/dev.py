"""``lakesync dev``: gateway + Dagster UI + demo clients on the embedded defaults.

Processes (all children of this one, each in a session of its own):

1. the gateway (``python -m lakesync_platform.cli gateway --no-auth``) on the embedded WAL;
2. the Spark Connect server (:mod:`lakesync_platform.pipeline.spark_server`) on the embedded
   lake, which
   every pipeline run connects to (``LAKESYNC_SPARK_REMOTE``) instead of starting a JVM;
3. ``dagster dev -w workspace.yaml`` with ``DAGSTER_HOME=<data-dir>/dagster`` and low backlog
   thresholds, so the sensors flush, merge and materialise the demo within seconds;
4. demo clients (threads here) writing into the ``todos`` table of gateway ``demo`` over HTTP.

The demo table is declared in ``<defs>/todos.yaml`` (the repository's ``defs/`` when present,
else a copy written into ``<data-dir>/defs``) with an SQLite destination
``<data-dir>/destination.db``; the clients also register the schema through the admin route.

Stopping (Ctrl-C or SIGTERM, :meth:`DevStack.stop`) takes at most :data:`STOP_SECONDS`: the
runs in progress are terminated through Dagster, so they are recorded CANCELED, not failed
(:mod:`.dagster_runs`); then every process of the children's sessions gets SIGTERM, and what is
left at the deadline SIGKILL (:mod:`.sessions`). Runs a killed stack left started are marked
canceled when the next one starts.
"""

from __future__ import annotations

import contextlib
import logging
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..core.delta import DELETE, UPDATE, ColumnDelta, RowDelta
from ..core.hlc import HLC
from ..core.ids import delta_id
from ..core.wire import delta_to_wire
from ..settings import (
    ENV_BACKLOG_AGE_SECONDS,
    ENV_BACKLOG_BYTES,
    ENV_BACKLOG_SENSOR_SECONDS,
    ENV_DATA_DIR,
    ENV_DEFS_DIR,
    ENV_FOLLOW_SECONDS,
    ENV_JAR_DIR,
    ENV_SPARK_REMOTE,
    ENV_WAL_URL,
    DataLayout,
    PipelineSettings,
)
from ..testing import DEMO_GATEWAY, DEMO_TODOS, GatewayProcess, demo_declarations_yaml
from .dagster_runs import DagsterRuns
from .sessions import end_sessions, signal_sessions

__all__ = ["STOP_SECONDS", "DevStack", "DevStackSettings"]

STOP_SECONDS = 9.0
"""How long :meth:`DevStack.stop` may take, from the signal to the last child gone (the promise
to a service manager is 10 s)."""

log = logging.getLogger(__name__)

DAGSTER_YAML = """\
# Written by `lakesync dev`: one sync run per gateway at a time; the package's log lines (a
# stage waiting for the lake's lock) in each run's event log.
concurrency:
  runs:
    tag_concurrency_limits:
      - key: lakesync/gateway
        value:
          applyLimitPerUniqueValue: true
        limit: 1
# The queue hands a run to its worker within a second of the sensor's request (Dagster's
# default is 5 s): part of a change's way to the destinations (docs/pipeline.md, Freshness).
run_queue:
  dequeue_interval_seconds: 1
python_logs:
  managed_python_loggers:
    - lakesync_platform
  python_log_level: WARNING
"""


@dataclass(frozen=True, slots=True)
class DevStackSettings:
    """Ports, folders and demo pace of the development stack."""

    data_dir: Path
    defs_dir: Path | None
    workspace: Path
    gateway_port: int = 8000
    dagster_port: int = 3000
    demo_clients: int = 3
    demo_interval_s: float = 1.0
    backlog_bytes: int = 4_000
    backlog_age_seconds: int = 1
    backlog_sensor_seconds: int = 1
    follow_seconds: float = 30.0
    """How long a sync run goes on syncing after the last change (``LAKESYNC_FOLLOW_SECONDS``)."""
    dagster_start_timeout_s: float = 180.0
    jar_dir: Path | None = None
    """``LAKESYNC_JAR_DIR`` made absolute for the children (``None``: ``<data-dir>/jars``)."""
    spark_port: int = 15002
    """The Spark Connect server's port (0: no server; every run starts its own Spark)."""
    spark_start_timeout_s: float = 180.0


class DemoClient:
    """One demo client pushing random todo changes over HTTP."""

    def __init__(self, base_url: str, client_id: str, rnd: random.Random) -> None:
        self.base_url = base_url
        self.client_id = client_id
        self.rnd = rnd
        self.hlc = HLC(clock=lambda: int(time.time() * 1000))

    def _delta(self, op: str, row_id: str, columns: Sequence[ColumnDelta]) -> dict[str, Any]:
        hlc = self.hlc.now()
        cols = tuple(columns)
        table = DEMO_TODOS["table"]
        return delta_to_wire(
            RowDelta(
                op, table, row_id, self.client_id, cols, hlc,
                delta_id(self.client_id, hlc, table, row_id, cols),
            )
        )  # fmt: skip

    def step(self, http: httpx.Client) -> None:
        """Push one random insert/update/delete."""
        row_id = f"todo-{self.rnd.randrange(40)}"
        if self.rnd.random() < 0.1:
            delta = self._delta(DELETE, row_id, ())
        else:
            cols = [
                ColumnDelta("title", f"{self.rnd.choice(['buy', 'write', 'fix'])} #{row_id[5:]}"),
                ColumnDelta("completed", self.rnd.random() < 0.3),
            ]
            if self.rnd.random() < 0.5:
                cols.append(ColumnDelta("priority", self.rnd.randrange(1, 5)))
            if self.rnd.random() < 0.3:
                cols.append(ColumnDelta("tags", [self.client_id, "demo"]))
            delta = self._delta(UPDATE, row_id, cols)
        body = {"clientId": self.client_id, "deltas": [delta], "lastSeenHlc": "0"}
        response = http.post(f"{self.base_url}/v1/sync/{DEMO_GATEWAY}/push", json=body)
        response.raise_for_status()


class DevStack:
    """Start, watch and stop the development stack (see the module docstring)."""

    def __init__(self, settings: DevStackSettings, env: Mapping[str, str]) -> None:
        self.settings = settings
        self.env = dict(env)
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.pushed = 0

    @property
    def gateway_url(self) -> str:
        """Base URL of the gateway."""
        return f"http://127.0.0.1:{self.settings.gateway_port}"

    @property
    def dagster_url(self) -> str:
        """Base URL of the Dagster UI."""
        return f"http://127.0.0.1:{self.settings.dagster_port}"

    def _defs_dir(self) -> Path:
        if self.settings.defs_dir is not None and self.settings.defs_dir.is_dir():
            return self.settings.defs_dir
        folder = self.settings.data_dir / "defs"
        folder.mkdir(parents=True, exist_ok=True)
        demo = folder / "todos.yaml"
        if not demo.exists():
            demo.write_text(demo_declarations_yaml())
        return folder

    def _spawn(self, name: str, cmd: list[str], env: Mapping[str, str], cwd: Path) -> None:
        log_path = self.settings.data_dir / f"{name}.log"
        with log_path.open("ab") as out:
            proc = subprocess.Popen(
                cmd,
                env=dict(env),
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append((name, proc))

    def start(self, echo: Callable[[str], None] = print) -> None:
        """Start the gateway, Dagster and the demo clients; return once they answer (runs an
        earlier stack left started are marked canceled on the way)."""
        started_at = time.time()
        s = self.settings
        data = s.data_dir.resolve()
        data.mkdir(parents=True, exist_ok=True)
        dagster_home = data / "dagster"
        dagster_home.mkdir(exist_ok=True)
        (dagster_home / "dagster.yaml").write_text(DAGSTER_YAML)
        defs = self._defs_dir().resolve()
        env = {
            **self.env,
            ENV_DATA_DIR: str(data),
            ENV_DEFS_DIR: str(defs),
            ENV_WAL_URL: DataLayout(data).wal_url,
            ENV_BACKLOG_BYTES: str(s.backlog_bytes),
            ENV_BACKLOG_AGE_SECONDS: str(s.backlog_age_seconds),
            ENV_BACKLOG_SENSOR_SECONDS: str(s.backlog_sensor_seconds),
            ENV_FOLLOW_SECONDS: str(s.follow_seconds),
            "DAGSTER_HOME": str(dagster_home),
            "PYTHONUNBUFFERED": "1",
        }
        if s.jar_dir is not None:  # the runs start in the workspace's folder, not in ours
            env[ENV_JAR_DIR] = str(s.jar_dir.resolve())
        spark_proc = None
        if s.spark_port:
            spark_proc = self._start_spark(env, echo)
            env[ENV_SPARK_REMOTE] = f"sc://127.0.0.1:{s.spark_port}"
        echo(f"gateway   → {self.gateway_url}   (log {data / 'gateway.log'})")
        gateway = GatewayProcess(
            data,
            secret=None,
            port=s.gateway_port,
            env=env,
            cwd=s.workspace.parent,
            log_path=data / "gateway.log",
        )
        try:
            gateway.start(timeout=60)
        finally:
            if gateway.proc is not None:
                self.procs.append(("gateway", gateway.proc))
        httpx.post(
            f"{self.gateway_url}/v1/admin/schema/{DEMO_GATEWAY}", json=DEMO_TODOS, timeout=10
        ).raise_for_status()
        dagster_bin = Path(sys.executable).with_name("dagster")
        dagster_cmd = (
            [str(dagster_bin)] if dagster_bin.exists() else [sys.executable, "-m", "dagster"]
        )
        echo(f"dagster   → {self.dagster_url}   (log {data / 'dagster.log'})")
        self._spawn(
            "dagster",
            [
                *dagster_cmd,
                "dev",
                "-w",
                str(s.workspace),
                "-h",
                "127.0.0.1",
                "-p",
                str(s.dagster_port),
            ],
            env,
            s.workspace.parent,
        )
        for i in range(s.demo_clients):
            client = DemoClient(self.gateway_url, f"demo-client-{i + 1}", random.Random(i))
            thread = threading.Thread(target=self._run_client, args=(client,), daemon=True)
            thread.start()
            self._threads.append(thread)
        echo(
            f"demo      → {s.demo_clients} clients writing gateway '{DEMO_GATEWAY}' table 'todos'"
            f"; destination {data / 'destination.db'}"
        )
        if spark_proc is not None:
            from ..pipeline.spark_server import wait_for_server

            waited = wait_for_server(
                env[ENV_SPARK_REMOTE], spark_proc, timeout_s=s.spark_start_timeout_s
            )
            echo(f"spark     ready in {waited:.1f}s")
        echo("waiting for the Dagster UI …")
        self._wait_for_dagster()
        try:
            leftovers = DagsterRuns(self.dagster_url).cancel_leftovers(created_before=started_at)
        except httpx.HTTPError as exc:
            echo(f"could not check for runs an earlier stop left in progress ({exc})")
        else:
            if leftovers:
                echo(f"marked {len(leftovers)} run(s) an earlier stop left in progress canceled")

    def _start_spark(
        self, env: Mapping[str, str], echo: Callable[[str], None]
    ) -> subprocess.Popen[bytes]:
        """Start the Spark Connect server of the stack's lake (its readiness is awaited
        later, while Dagster starts too)."""
        from ..pipeline.spark_server import start_spark_server

        s = self.settings
        log_path = s.data_dir / "spark-connect.log"
        echo(f"spark     → sc://127.0.0.1:{s.spark_port}   (log {log_path})")
        proc, _ = start_spark_server(
            PipelineSettings.from_env(env), s.spark_port, env, log_path=log_path
        )
        self.procs.append(("spark", proc))
        return proc

    def _wait_for_dagster(self) -> None:
        deadline = time.monotonic() + self.settings.dagster_start_timeout_s
        dagster = dict(self.procs)["dagster"]
        while time.monotonic() < deadline:
            if dagster.poll() is not None:
                raise RuntimeError(
                    f"dagster dev exited with {dagster.returncode}; "
                    f"see {self.settings.data_dir / 'dagster.log'}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.dagster_url}/server_info", timeout=2).is_success:
                    return
            time.sleep(0.5)
        raise RuntimeError(
            f"the Dagster UI did not answer within {self.settings.dagster_start_timeout_s:.0f}s; "
            f"see {self.settings.data_dir / 'dagster.log'}"
        )

    def _run_client(self, client: DemoClient) -> None:
        with httpx.Client(timeout=10) as http:
            while not self._stop.is_set():
                try:
                    client.step(http)
                    self.pushed += 1
                except httpx.HTTPError as exc:
                    log.warning("demo client %s: %s", client.client_id, exc)
                self._stop.wait(self.settings.demo_interval_s * (0.5 + client.rnd.random()))

    def wait(self) -> int:
        """Block until Ctrl-C or a child exits; return a process exit code."""
        try:
            while True:
                for name, proc in self.procs:
                    if proc.poll() is not None:
                        log.error("%s exited with %s", name, proc.returncode)
                        return 1
                time.sleep(0.5)
        except KeyboardInterrupt:
            return 0

    def stop(self, echo: Callable[[str], None] = print) -> None:
        """Stop within :data:`STOP_SECONDS`: the demo clients, the runs in progress (canceled
        through Dagster), then every process of the children's sessions (SIGTERM, then SIGKILL
        at the deadline)."""
        deadline = time.monotonic() + STOP_SECONDS
        self._stop.set()
        clients_until = time.monotonic() + 1.0  # a push stuck on a dying gateway is abandoned
        for thread in self._threads:
            thread.join(timeout=max(0.0, clients_until - time.monotonic()))
        children = dict(self.procs)
        if "gateway" in children:  # nothing waits for it: it stops while the runs are canceled
            signal_sessions([children["gateway"].pid], signal.SIGTERM)
        dagster = children.get("dagster")
        if dagster is not None and dagster.poll() is None:
            try:
                # Leave the processes 3 s to exit after the runs are canceled.
                canceled = DagsterRuns(self.dagster_url).cancel_in_progress(deadline - 3.0)
                if canceled:
                    echo(f"canceled {len(canceled)} run(s) in progress")
            except httpx.HTTPError as exc:
                echo(f"could not cancel the runs in progress through Dagster ({exc})")
        killed = end_sessions(
            [proc.pid for _, proc in self.procs],
            grace_s=max(0.5, deadline - time.monotonic() - 1.0),
        )
        if killed:
            echo(f"killed {len(killed)} process(es) that outlived SIGTERM")
        for _, proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
        self.procs.clear()
