"""The lake's fork-free local filesystem, compiled from the Java source shipped in the package.

``java/NoForkLocalFileSystem.java`` is compiled against pyspark's Hadoop API into
``lakesync-local-fs-<digest>.jar``: the lake's local filesystem without a ``chmod`` process per
written file (the session factory configures it for the ``lakesync`` catalog as
:data:`LOCAL_FS_CLASS`). Without ``javac`` the step is skipped and the lake runs on Hadoop's
default.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from . import package_dir
from .jdk import find_javac

__all__ = ["LOCAL_FS_CLASS", "ensure_local_fs_jar"]

log = logging.getLogger(__name__)

LOCAL_FS_CLASS = "io.lakesync.platform.hadoop.NoForkLocalFileSystem"
"""The fork-free local filesystem compiled by :func:`ensure_local_fs_jar`."""
_LOCAL_FS_SOURCE = Path(__file__).resolve().parent / "java" / "NoForkLocalFileSystem.java"


def _local_fs_jar_name() -> str:
    digest = hashlib.sha256(_LOCAL_FS_SOURCE.read_bytes()).hexdigest()[:12]
    return f"lakesync-local-fs-{digest}.jar"


def ensure_local_fs_jar(jar_dir: Path, env: Mapping[str, str]) -> Path | None:
    """Compile the fork-free local filesystem into ``jar_dir`` (idempotent); return its jar.

    ``env`` is the process environment ``javac`` is looked up in. The jar's name carries a
    digest of the source, so an edited source is rebuilt and older builds are removed. Returns
    ``None`` (logged) when no ``javac`` is available or the build fails: the optimisation is
    optional, the lake then uses Hadoop's default filesystem.
    """
    dest = jar_dir / _local_fs_jar_name()
    if dest.exists():
        return dest
    javac = find_javac(env)
    if javac is None:
        log.info("no javac: the lake uses Hadoop's default local filesystem")
        return None
    hadoop_api = sorted((package_dir("pyspark") / "jars").glob("hadoop-client-api-*.jar"))
    if not hadoop_api:
        log.warning("pyspark ships no hadoop-client-api jar; the lake uses Hadoop's default")
        return None
    jar_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lakesync-localfs-", dir=jar_dir) as tmp_name:
        classes = Path(tmp_name) / "classes"
        result = subprocess.run(
            [
                str(javac),
                "--release",
                "8",
                "-Xlint:-options",
                "-cp",
                str(hadoop_api[-1]),
                "-d",
                str(classes),
                str(_LOCAL_FS_SOURCE),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            log.warning("javac failed; the lake uses Hadoop's default: %s", result.stderr[-2000:])
            return None
        built = Path(tmp_name) / "out.jar"
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for cls in sorted(classes.rglob("*.class")):
                out.write(cls, cls.relative_to(classes).as_posix())
        built.replace(dest)
    for stale in jar_dir.glob("lakesync-local-fs-*.jar"):
        if stale != dest:
            stale.unlink(missing_ok=True)
    return dest
