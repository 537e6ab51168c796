"""``lakesync dev`` as a real process: Dagster serves the pipeline's assets, and a SIGTERM ends
every descendant within 10 s and leaves the runs CANCELED (the one in progress and one an
earlier, killed stack left started), never failed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesync_platform.testing import free_port

REPO = Path(__file__).resolve().parents[2]


def _graphql(port: int, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    response = httpx.post(
        f"http://127.0.0.1:{port}/graphql",
        json={"query": query, "variables": variables or {}},
        timeout=30,
    )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    assert not body.get("errors"), body
    return dict(body["data"])


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name; None once the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _descendants(root: int) -> dict[int, str]:
    """``pid → command line`` of every live descendant of ``root`` (walking parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        fields = _stat(int(entry)) if entry.isdigit() else None
        if fields is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: dict[int, str] = {}
    stack = [root]
    while stack:
        for pid in children.get(stack.pop(), []):
            with contextlib.suppress(OSError):
                found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stack.append(pid)
    return found


def _is_spark_jvm(cmdline: str) -> bool:
    """A Spark driver JVM — the stack's Spark Connect server, or one a run would start (not the
    launcher JVM before it)."""
    return cmdline.split(" ")[0].endswith("java") and "spark.launcher.Main" not in cmdline


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _wait_for(what: str, condition: Any, timeout: float, proc: subprocess.Popen[bytes]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"lakesync dev exited while waiting for {what}"
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _seed_leftover_run(dagster_home: Path) -> str:
    """A run an earlier stack left STARTED when it was killed."""
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home))) as instance:
        run_id = str(uuid.uuid4())
        status = dg.DagsterRunStatus.STARTED
        instance.add_run(dg.DagsterRun(job_name="sync_demo", run_id=run_id, status=status))
        return run_id


def _statuses(dagster_home: Path, run_ids: list[str]) -> dict[str, str]:
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home))) as instance:
        return {r: instance.get_run_by_id(r).status.value for r in run_ids}  # type: ignore[union-attr]


_LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
  }
}"""


_REPOSITORIES = """
{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"""


def _launch_sync_run(port: int) -> str:
    repos = _graphql(port, _REPOSITORIES)["repositoriesOrError"]["nodes"]
    selector = {
        "repositoryLocationName": repos[0]["location"]["name"],
        "repositoryName": repos[0]["name"],
        "jobName": "sync_demo",
    }
    launched = _graphql(port, _LAUNCH, {"params": {"selector": selector, "runConfigData": {}}})
    assert launched["launchRun"]["__typename"] == "LaunchRunSuccess", launched
    return str(launched["launchRun"]["run"]["runId"])


@pytest.mark.slow
def test_lakesync_dev_serves_the_assets_and_stops_everything_on_sigterm(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "dagster").mkdir(parents=True)
    leftover = _seed_leftover_run(data / "dagster")
    dagster_port = free_port()
    out = tmp_path / "dev.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESYNC_", "DAGSTER_"))}
    env["LAKESYNC_JAR_DIR"] = "data/jars"  # relative to the repository, filled by setup.sh
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "lakesync_platform.cli", "dev", "--data-dir", str(data)),
                *("--defs", str(REPO / "defs"), "--clients", "0"),
                *("--gateway-port", str(free_port()), "--dagster-port", str(dagster_port)),
            ],
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    descendants: dict[int, str] = {}
    try:
        _wait_for("the stack", lambda: b"running" in out.read_bytes(), 240, proc)
        assert b"marked 1 run(s) an earlier stop left in progress canceled" in out.read_bytes()
        nodes = _graphql(dagster_port, "{ assetNodes { assetKey { path } } }")["assetNodes"]
        keys = {"/".join(n["assetKey"]["path"]) for n in nodes}
        assert {"demo/lakesync_deltas", "demo/state/todos", "demo/local/todos"} <= keys

        # The stack's Spark Connect server: the one driver JVM, which the runs connect to.
        servers = [c for c in _descendants(proc.pid).values() if _is_spark_jvm(c)]
        assert len(servers) == 1 and "SparkConnectServer" in servers[0], servers
        assert "data/jars" in servers[0]  # it loads LAKESYNC_JAR_DIR's jars
        run_id = _launch_sync_run(dagster_port)
        _wait_for(
            "the run to start",
            lambda: _statuses(data / "dagster", [run_id])[run_id] == "STARTED",
            180,
            proc,
        )
        descendants = _descendants(proc.pid)
        # The run is a thin client: it starts no JVM of its own.
        assert [c for c in descendants.values() if _is_spark_jvm(c)] == servers
        assert not (data / "jars").exists()

        signaled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        while any(_alive(p) for p in descendants) and time.monotonic() - signaled < 10:
            time.sleep(0.1)
        left = {p: cmd for p, cmd in descendants.items() if _alive(p)}
        assert left == {}, f"alive 10 s after SIGTERM: {left}"
        assert _statuses(data / "dagster", [run_id, leftover]) == {
            run_id: "CANCELED",
            leftover: "CANCELED",
        }, out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in {*descendants, *_descendants(proc.pid)}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
