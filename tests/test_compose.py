"""``docker-compose.yml`` describes the topology the tests start, with commands the programs
accept and settings the settings module knows (docs/deploy.md).

Docker cannot run here, so the file is checked, not started: each service command built from
the repository's image is parsed by its program's own click command (``lakesync``,
``dagster-webserver``, ``dagster-daemon``) or compared with the command the tests run
(``spark-class`` master and worker, ``haproxy``); HAProxy checks ``deploy/haproxy.cfg`` with
the compose service's environment; every ``LAKESYNC_*`` variable is one of
:mod:`lakesync_platform.settings` and parses there.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from lakesync_platform import settings
from lakesync_platform.cli.dev import DAGSTER_YAML
from lakesync_platform.settings import (
    ENV_CATALOG_URI,
    ENV_DRAIN_SECONDS,
    ENV_SPARK_DRIVER_HOST,
    ENV_SPARK_MASTER,
    ENV_SPARK_REMOTE,
    ENV_WAL_URL,
    ENV_WAREHOUSE,
    PipelineSettings,
)
from lakesync_platform.testing_cluster import LoadBalancer, SparkMaster, SparkWorker
from tests.helpers import ROOT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
KNOWN_SETTINGS = {v for k, v in vars(settings).items() if k.startswith("ENV_")}
PIPELINE_SERVICES = ("dagster-webserver", "dagster-daemon")
SPARK_SERVER = "spark-connect"
GATEWAYS = sorted(name for name in SERVICES if name.startswith("gateway-"))


def _env(service: str) -> dict[str, str]:
    return {k: str(v) for k, v in (SERVICES[service].get("environment") or {}).items()}


def _command_of(program: str) -> click.Command:
    """The click command behind an installed console script."""
    [entry] = [e for e in importlib.metadata.entry_points(group="console_scripts", name=program)]
    loaded = entry.load()
    if isinstance(loaded, click.Command):
        return loaded
    command = importlib.import_module(entry.module).cli  # a wrapper function around `cli`
    assert isinstance(command, click.Command), program
    return command


def _parse(argv: list[str]) -> list[str]:
    """Parse ``argv`` with its program's click command (groups down to the subcommand), as the
    program would; return the command path. Raises ``click.UsageError`` on anything wrong."""
    prog, *args = argv
    command, parent, path = _command_of(prog), None, [prog]
    while isinstance(command, click.Group):
        group_ctx = click.Context(command, info_name=path[-1], parent=parent)
        sub = command.get_command(group_ctx, args[0])
        assert sub is not None, f"{prog}: no command {args[0]!r}"
        parent, command = group_ctx, sub
        path.append(args.pop(0))
    command.make_context(path[-1], args, parent=parent)
    return path


def test_the_topology_has_every_part_the_tests_start() -> None:
    assert {"postgres", "minio", "spark-master", "spark-worker", "haproxy", SPARK_SERVER} <= set(
        SERVICES
    )
    assert set(PIPELINE_SERVICES) <= set(SERVICES)
    assert len(GATEWAYS) >= 2
    for name in [*GATEWAYS, *PIPELINE_SERVICES, SPARK_SERVER, "spark-master", "spark-worker"]:
        assert SERVICES[name].get("build") == ".", f"{name} runs the repository's image"


@pytest.mark.parametrize("service", [*GATEWAYS, *PIPELINE_SERVICES, SPARK_SERVER])
def test_every_command_is_one_its_program_accepts(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # the image's working directory holds the same workspace.yaml
    command = [str(part) for part in SERVICES[service]["command"]]
    with CliRunner().isolation(env=_env(service)):  # the variables click options read
        path = _parse(command)
    expected = {
        "gateway": ["lakesync", "gateway"],
        "spark-server": ["lakesync", "spark-server"],
        "run": ["dagster-daemon", "run"],
    }
    assert path == expected.get(command[1], [command[0]])


def test_a_command_the_cli_does_not_accept_is_caught() -> None:
    with pytest.raises(click.UsageError):
        _parse(["lakesync", "gateway", "--workers", "two"])
    with pytest.raises(click.UsageError):
        _parse(["lakesync", "gateway", "--no-such-flag"])
    with pytest.raises(AssertionError):
        _parse(["lakesync", "serve"])


def test_every_lakesync_setting_is_known_and_parses() -> None:
    for service, spec in SERVICES.items():
        named = {k for k in (spec.get("environment") or {}) if k.startswith("LAKESYNC_")}
        assert named <= KNOWN_SETTINGS, f"{service}: unknown settings {named - KNOWN_SETTINGS}"
    for service in [*GATEWAYS, *PIPELINE_SERVICES, SPARK_SERVER]:
        env = _env(service)
        # The scale-out settings the tests set: WAL and catalog on PostgreSQL, the warehouse in
        # the bucket, the pipeline on the cluster, the gateways draining.
        for name in (ENV_WAL_URL, ENV_CATALOG_URI, ENV_WAREHOUSE, ENV_SPARK_MASTER):
            assert name in env, f"{service} lacks {name}"
        pipeline = PipelineSettings.from_env(env)
        assert pipeline.spark_master.startswith("spark://spark-master:")
        assert pipeline.warehouse and pipeline.warehouse.startswith("s3://")
    assert float(_env(GATEWAYS[0])[ENV_DRAIN_SECONDS]) > 0


def test_pipeline_runs_are_thin_clients_of_the_spark_server() -> None:
    command = SERVICES[SPARK_SERVER]["command"]
    port = command[command.index("--port") + 1]
    for service in PIPELINE_SERVICES:
        assert _env(service)[ENV_SPARK_REMOTE] == f"sc://{SPARK_SERVER}:{port}"
        assert SPARK_SERVER in SERVICES[service]["depends_on"]
    # The server is the driver the executors call back: it names itself, not the default host.
    assert _env(SPARK_SERVER)[ENV_SPARK_DRIVER_HOST] == SPARK_SERVER


def _flags(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("--")]


def test_the_spark_cluster_runs_the_commands_the_tests_run(tmp_path: Path) -> None:
    master_cmd = [str(a) for a in SERVICES["spark-master"]["command"]]
    worker_cmd = [str(a) for a in SERVICES["spark-worker"]["command"]]
    master = SparkMaster(tmp_path)
    worker = SparkWorker(master, tmp_path)
    assert master_cmd[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert master_cmd[1:2] == master.command()[1:2] and worker_cmd[1:2] == worker.command()[1:2]
    assert _flags(master_cmd) == _flags(master.command())
    assert _flags(worker_cmd) == _flags(worker.command())
    host, port = (
        master_cmd[master_cmd.index("--host") + 1],
        master_cmd[master_cmd.index("--port") + 1],
    )
    assert worker_cmd[-1] == f"spark://{host}:{port}"
    for service in PIPELINE_SERVICES:
        assert _env(service)[ENV_SPARK_MASTER] == f"spark://{host}:{port}"


def test_the_balancer_runs_the_repository_config_in_front_of_every_gateway(
    tmp_path: Path,
) -> None:
    spec = SERVICES["haproxy"]
    config_in_container = spec["command"][-1]
    assert f"./deploy/haproxy.cfg:{config_in_container}:ro" in spec["volumes"]
    three = [f"127.0.0.1:{port}" for port in (1, 2, 3)]  # as many as test_balancer starts
    balancer = LoadBalancer(ROOT / "deploy" / "haproxy.cfg", three, tmp_path / "log")
    assert spec["command"][:-1] == balancer.command()[:-1]
    env = _env("haproxy")
    assert set(env) == set(balancer.env)  # the same variables the tests set
    targets = sorted(v for k, v in env.items() if re.fullmatch(r"LB_GATEWAY_\d", k))
    assert targets == [f"{g}:8000" for g in GATEWAYS]
    for gateway in GATEWAYS:
        command = SERVICES[gateway]["command"]
        assert command[command.index("--port") + 1] == "8000"
    drain = float(_env(GATEWAYS[0])[ENV_DRAIN_SECONDS])
    interval = float(env["LB_CHECK_INTERVAL"].removesuffix("s"))
    assert drain >= interval * int(env["LB_CHECK_FALL"]), "the drain must outlast the checks"

    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (scripts/setup.sh installs it)")
    # HAProxy checks the file with the service's environment (compose's host names, which
    # only Docker's DNS knows, stand for loopback here).
    local = {k: re.sub(r"^gateway-\d+", "127.0.0.1", v) for k, v in env.items()}
    check = subprocess.run(
        ["haproxy", "-c", "-f", str(ROOT / "deploy" / "haproxy.cfg")],
        env={"PATH": "/usr/sbin:/usr/bin:/bin", **local},
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_dagster_gets_the_settings_lakesync_dev_writes() -> None:
    for service in PIPELINE_SERVICES:
        home = _env(service)["DAGSTER_HOME"]
        assert f"./deploy/dagster.yaml:{home}/dagster.yaml:ro" in SERVICES[service]["volumes"]
    deployed = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())
    assert deployed == yaml.safe_load(DAGSTER_YAML)
