"""The scaled-out topology's other processes on one machine, for tests and benchmarks.

Beside :mod:`lakesync_platform.testing`'s gateway process and S3 server:

* :class:`SparkMaster` and :class:`SparkWorker` — a Spark standalone cluster started from the
  pip package's own ``bin/spark-class`` (STACK.md, "Services"), on loopback and free ports.
  A worker can be started in a mount namespace of its own in which given folders are empty
  (``hide``): its executors then see nothing of the driver's disk, as on another host.
* :class:`LoadBalancer` — HAProxy (Debian's ``haproxy``) with the repository's
  ``deploy/haproxy.cfg``, its addresses and check timings passed as environment variables.

Each ``command()`` is the same command ``docker-compose.yml`` runs for that service (the
compose test compares them), with this machine's addresses.
"""

from __future__ import annotations

import csv
import http.client
import io
import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from .testing import Served, free_port, stop_group

__all__ = [
    "MASTER_CLASS",
    "WORKER_CLASS",
    "LoadBalancer",
    "SparkMaster",
    "SparkWorker",
    "can_hide_paths",
    "spark_home",
]

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The installed ``pyspark`` package: Spark's home, with ``bin/spark-class``."""
    spec = find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed (pip install -e '.[pipeline]')")
    return Path(spec.origin).parent


def _daemon_env(log_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESYNC_", "SPARK_"))}
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOG_DIR=str(log_dir),
        SPARK_DAEMON_MEMORY="256m",  # the master's and workers' own JVMs, not the executors'
        SPARK_NO_DAEMONIZE="1",
    )
    return env


def _get_json(host: str, port: int, path: str, timeout: float = 5.0) -> Any:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise OSError(f"GET {path} answered {response.status}")
        return json.loads(body)
    finally:
        conn.close()


def _wait(what: str, ready: Any, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    """Poll ``ready()`` until it is true; fail with the log's tail if the process exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited:\n{log.read_text()[-3000:]}")
        try:
            if ready():
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not become ready:\n{log.read_text()[-3000:]}")


@dataclass
class SparkMaster(Served):
    """A Spark standalone master on ``host`` (``spark://host:port``, web UI and ``/json/`` on
    ``webui_port``); its log goes to ``log_dir``."""

    log_dir: Path
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    webui_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The master URL (``LAKESYNC_SPARK_MASTER``)."""
        return f"spark://{self.host}:{self.port}"

    def command(self, spark_class: str | None = None) -> list[str]:
        """The command line (``spark_class``: the launcher's path; default the package's)."""
        launcher = spark_class or str(spark_home() / "bin" / "spark-class")
        return [
            *(launcher, MASTER_CLASS, "--host", self.host, "--port", str(self.port)),
            *("--webui-port", str(self.webui_port)),
        ]

    def state(self) -> dict[str, Any]:
        """The master's ``/json/``: its workers, running and completed applications."""
        state: dict[str, Any] = _get_json(self.host, self.webui_port, "/json/")
        return state

    def start(self, timeout: float = 60.0) -> SparkMaster:
        """Start the master and wait until it is ``ALIVE``."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / "master.log"
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=out,
                stderr=out,
                env=_daemon_env(self.log_dir),
                start_new_session=True,
            )
        alive = lambda: self.state().get("status") == "ALIVE"  # noqa: E731
        _wait("Spark master", alive, self.proc, log, timeout)
        return self

    def stop(self) -> None:
        """Stop the master."""
        stop_group(self.proc, 15.0)


def can_hide_paths() -> bool:
    """Whether this process may start a worker in a mount namespace of its own (root, or the
    capability, and ``unshare`` from util-linux)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


@dataclass
class SparkWorker(Served):
    """A Spark standalone worker of ``master`` with ``cores`` and ``memory`` for executors.

    Executors run in ``work_dir`` (their own copies of the application's jars, fetched from
    the driver) with scratch space under it. ``hide``: folders that look empty to the worker
    and its executors (each gets an empty ``tmpfs`` mounted over it in a private mount
    namespace; see :func:`can_hide_paths`).
    """

    master: SparkMaster
    work_dir: Path
    cores: int = 1
    memory: str = "1g"
    hide: Sequence[Path] = ()
    host: str = "127.0.0.1"
    webui_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def command(self, spark_class: str | None = None) -> list[str]:
        """The command line (``spark_class``: the launcher's path; default the package's)."""
        launcher = spark_class or str(spark_home() / "bin" / "spark-class")
        return [
            *(launcher, WORKER_CLASS, "--host", self.host, "--webui-port", str(self.webui_port)),
            *("--cores", str(self.cores), "--memory", self.memory),
            *("--work-dir", str(self.work_dir / "work"), self.master.url),
        ]

    def _argv(self) -> list[str]:
        if not self.hide:
            return self.command()
        mounts = "".join(
            f"mount -t tmpfs -o size=1m,mode=0755 lakesync-hidden {shlex.quote(str(p))}; "
            for p in self.hide
        )
        script = f'set -e; {mounts}exec "$@"'
        unshare = ("unshare", "--mount", "--propagation", "private", "--")
        return [*unshare, "/bin/sh", "-c", script, "spark-worker", *self.command()]

    def registered(self) -> bool:
        """Whether the master lists this worker as ``ALIVE``."""
        return any(
            w.get("host") == self.host
            and w.get("state") == "ALIVE"
            and str(w.get("webuiaddress", "")).endswith(f":{self.webui_port}")
            for w in self.master.state().get("workers", [])
        )

    def start(self, timeout: float = 60.0) -> SparkWorker:
        """Start the worker and wait until the master lists it."""
        (self.work_dir / "local").mkdir(parents=True, exist_ok=True)
        env = _daemon_env(self.work_dir)
        env["SPARK_LOCAL_DIRS"] = str(self.work_dir / "local")  # executors' scratch space
        log = self.work_dir / "worker.log"
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                self._argv(), stdout=out, stderr=out, env=env, start_new_session=True
            )
        _wait("Spark worker", self.registered, self.proc, log, timeout)
        return self

    def sees(self, path: Path) -> list[str]:
        """What the worker (and so its executors) finds in folder ``path``, looked at through
        its own mount namespace (``/proc/<pid>/root``)."""
        assert self.proc is not None
        return sorted(os.listdir(f"/proc/{self.proc.pid}/root{path.resolve()}"))

    def fetched_jars(self) -> list[str]:
        """Names of the jars executors of this worker fetched into their folders."""
        return sorted({p.name for p in (self.work_dir / "work").glob("app-*/*/*.jar")})

    def stop(self) -> None:
        """Stop the worker and its executors (one process group)."""
        stop_group(self.proc, 15.0)


@dataclass
class LoadBalancer(Served):
    """HAProxy with ``config`` (the repository's ``deploy/haproxy.cfg``) in front of the
    ``gateways`` (``host:port`` each, at most four), on a free port of 127.0.0.1.

    ``check_interval`` / ``fall`` / ``rise`` are the health check's timings (a gateway's drain
    delay must cover ``check_interval × fall``). The log (one line per request, with the
    server that took it and its status) goes to ``log_path``.
    """

    config: Path
    gateways: Sequence[str]
    log_path: Path
    check_interval: str = "2s"
    fall: int = 2
    rise: int = 2
    port: int = field(default_factory=free_port)
    stats_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Where clients connect."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The variables ``deploy/haproxy.cfg`` reads."""
        if not 1 <= len(self.gateways) <= 4:
            raise ValueError("deploy/haproxy.cfg takes one to four gateways")
        env = {
            "LB_BIND": f"127.0.0.1:{self.port}",
            "LB_STATS_BIND": f"127.0.0.1:{self.stats_port}",
            "LB_CHECK_INTERVAL": self.check_interval,
            "LB_CHECK_FALL": str(self.fall),
            "LB_CHECK_RISE": str(self.rise),
        }
        env.update({f"LB_GATEWAY_{i}": addr for i, addr in enumerate(self.gateways, 1)})
        return env

    def command(self) -> list[str]:
        """The command line: master-worker mode, in the foreground."""
        return ["haproxy", "-W", "-db", "-f", str(self.config)]

    def servers(self) -> dict[str, str]:
        """Each gateway's state as the balancer sees it (``UP``, ``DOWN``, ``UP 1/2`` …)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.stats_port, timeout=5)
        try:
            conn.request("GET", "/stats;csv")
            body = conn.getresponse().read().decode()
        finally:
            conn.close()
        rows = csv.DictReader(io.StringIO(body.lstrip("# ")))
        return {
            r["svname"]: r["status"]
            for r in rows
            if r["pxname"] == "gateways" and r["svname"] not in ("FRONTEND", "BACKEND")
        }

    def wait_for(self, states: Mapping[str, str], timeout: float = 30.0) -> None:
        """Wait until every named server (``gw1`` …) is in the given state (``UP``/``DOWN``)."""
        assert self.proc is not None
        _wait(
            f"balancer servers {dict(states)}",
            lambda: all(self.servers().get(n) == s for n, s in states.items()),
            self.proc,
            self.log_path,
            timeout,
        )

    def start(self, timeout: float = 30.0) -> LoadBalancer:
        """Start HAProxy and wait until its stats page answers. A port taken meanwhile (free
        when chosen, since used by another process's connection) is chosen again."""
        if shutil.which("haproxy") is None:
            raise RuntimeError("haproxy is not installed (scripts/setup.sh installs it)")
        for attempt in range(3):
            if attempt:
                self.port, self.stats_port = free_port(), free_port()
            env = {**{k: v for k, v in os.environ.items() if not k.startswith("LB_")}, **self.env}
            self.log_path.write_bytes(b"")
            with open(self.log_path, "ab") as out:
                self.proc = subprocess.Popen(
                    self.command(), stdout=out, stderr=out, env=env, start_new_session=True
                )
            try:
                _wait("HAProxy", lambda: bool(self.servers()), self.proc, self.log_path, timeout)
                return self
            except RuntimeError as exc:
                if "Address already in use" not in str(exc):
                    raise
                stop_group(self.proc, 10.0)
        raise RuntimeError("HAProxy found its ports taken three times")

    def stop(self) -> None:
        """Stop HAProxy."""
        stop_group(self.proc, 10.0)
