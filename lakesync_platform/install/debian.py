"""Debian packages the runtime is assembled from: query ``dpkg``, ``apt-get install`` the missing.

The installer is the only part of the platform that installs system packages; it runs from
``lakesync setup`` or from the session factory's first start, never on import.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from . import SetupError

__all__ = ["apt_install", "dpkg_installed"]

log = logging.getLogger(__name__)


def dpkg_installed(package: str) -> bool:
    """Whether the Debian package ``package`` is installed."""
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.returncode == 0 and "install ok installed" in result.stdout


def apt_install(packages: Sequence[str], env: Mapping[str, str]) -> None:
    """Install the ``packages`` that are missing (``sudo -n`` when not root; ``apt-get update``
    and one retry when the first attempt fails). ``env`` is the environment ``apt-get`` runs in."""
    missing = [p for p in packages if not dpkg_installed(p)]
    if not missing:
        return
    if shutil.which("apt-get", path=env.get("PATH")) is None:
        raise SetupError(f"Debian packages missing and no apt-get here: {' '.join(missing)}")
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    log.info("apt-get install %s", " ".join(missing))
    child_env = {**env, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = [*prefix, "apt-get", "install", "-y", "--no-install-recommends", *missing]
    result = subprocess.run(cmd, capture_output=True, text=True, env=child_env, check=False)
    if result.returncode != 0:
        update = subprocess.run(
            [*prefix, "apt-get", "update"],
            capture_output=True,
            text=True,
            env=child_env,
            check=False,
        )
        result = subprocess.run(cmd, capture_output=True, text=True, env=child_env, check=False)
        if update.returncode != 0 or result.returncode != 0:
            raise SetupError(f"apt-get install {' '.join(missing)} failed: {result.stderr[-2000:]}")
