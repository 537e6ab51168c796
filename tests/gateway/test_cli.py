"""``lakesync gateway``/``token``/``status``: settings come from flags and the environment once,
at the edge, into one :class:`GatewaySettings`."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from lakesync_platform.cli import main
from lakesync_platform.cli.gateway import gateway_settings
from lakesync_platform.core.auth import verify_token
from lakesync_platform.settings import ENV_DATA_DIR, ENV_JWT_SECRET, DataLayout
from lakesync_platform.wal.store import WriteAheadLog
from tests.helpers import ROOT


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lakesync_platform.cli", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    for command in ("gateway", "token", "status", "setup", "dev", "run"):
        assert f"  {command} " in done.stdout


def test_gateway_settings_from_flags(tmp_path: Path) -> None:
    settings = gateway_settings(
        tmp_path,
        wal_url=None,
        jwt_secret=None,
        jwt_secret_previous="old",
        no_auth=False,
        max_backlog_bytes=10,
        rate_limit=None,
        cors_origins=("https://a.example",),
    )
    layout = DataLayout.at(tmp_path)
    assert settings.wal_url == layout.wal_url
    created = layout.jwt_secret_file.read_text().strip()
    assert settings.jwt_secrets == (created, "old")
    assert layout.jwt_secret_file.stat().st_mode & 0o077 == 0
    assert (settings.max_backlog_bytes, settings.allowed_origins) == (10, ("https://a.example",))
    open_ = gateway_settings(
        tmp_path,
        wal_url="sqlite:///elsewhere.db",
        jwt_secret=None,
        jwt_secret_previous=None,
        no_auth=True,
        max_backlog_bytes=None,
        rate_limit=5,
        cors_origins=(),
    )
    assert (open_.auth_enabled, open_.jwt_secrets, open_.wal_url) == (
        False,
        (),
        "sqlite:///elsewhere.db",
    )
    assert open_.allowed_origins is None and open_.rate_limit == 5


def test_token_reads_the_secret_from_the_environment_or_the_data_dir(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(
        main, ["token", "--sub", "c1", "--gw", "g"], env={ENV_DATA_DIR: str(tmp_path)}
    )
    assert missing.exit_code != 0 and ENV_JWT_SECRET in missing.output
    by_env = runner.invoke(
        main,
        ["token", "--sub", "c1", "--gw", "g", "--claim", "team=a,b"],
        env={ENV_JWT_SECRET: "s3"},
    )
    assert by_env.exit_code == 0, by_env.output
    claims = verify_token(by_env.output.strip(), ("s3",), now_s=int(time.time()))
    assert (claims.sub, claims.gw, claims.claims["team"]) == ("c1", "g", ("a", "b"))


def test_status_on_an_empty_wal(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["status", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "no gateways yet"


def test_status_without_a_data_directory_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nosuch"
    result = CliRunner().invoke(main, ["status", "--data-dir", str(missing)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"no data directory {missing}" in result.output
    assert f"lakesync gateway --data-dir {missing}" in result.output
    assert "Traceback" not in result.output and not missing.exists()


def test_status_creates_no_wal_and_names_an_unknown_gateway(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["status", "--data-dir", str(tmp_path)])
    assert (result.exit_code, result.output.strip()) == (0, "no gateways yet")
    assert list(tmp_path.iterdir()) == []
    WriteAheadLog.open(DataLayout.at(tmp_path).wal_url).close()
    typo = CliRunner().invoke(main, ["status", "--data-dir", str(tmp_path), "--gw", "nosuch"])
    assert typo.exit_code == 2 and "unknown gateway 'nosuch'" in typo.output
