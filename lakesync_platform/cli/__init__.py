"""The ``lakesync`` command line.

Each command reads its settings once, here at the process edge (flags, then the environment
variables named in :mod:`lakesync_platform.settings`, then the defaults under the data
directory), and passes them down as settings objects:

* ``gateway`` — serve the sync gateway (:mod:`.gateway`);
* ``token`` — mint a token (:mod:`.token`); ``status`` — WAL counters (:mod:`.status`);
* ``doctor`` — what is wrong and the command that fixes it (:mod:`.doctor`, checks in
  :mod:`.checks`);
* ``setup``, ``run`` — prepare Spark and run a pipeline stage once; ``dev`` — the whole stack
  for development, supervised by :mod:`.dev` (:mod:`.run`);
* ``migrate`` — copy a destination's tables into another one (:mod:`.migrate`);
* ``query``, ``history`` — the lake read back, now or as it was (:mod:`.lake`);
* ``spark-server`` — the Spark Connect server pipeline processes connect to
  (:mod:`.spark_server`).

A missing data directory or WAL, an unknown gateway or a taken port stops a command with exit
status 2 and one line, before anything is created (:mod:`.checks`).
"""

from __future__ import annotations

import click

from . import run
from .doctor import doctor
from .gateway import gateway
from .lake import history, query
from .migrate import migrate
from .spark_server import spark_server
from .status import status
from .token import token

__all__ = ["main"]


@click.group()
@click.version_option(package_name="lakesync-platform")
def main() -> None:
    """LakeSync Platform: sync gateway, client SDK and lake pipeline."""


main.add_command(gateway)
main.add_command(token)
main.add_command(status)
main.add_command(doctor)
main.add_command(migrate)
run.register(main)
main.add_command(query)
main.add_command(history)
main.add_command(spark_server)
