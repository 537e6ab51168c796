"""Connector polls as assets and sensors both know them: the partitions, the job, the keys.

Every registered connector is one partition ``<gw>/<name>`` of the dynamic partitions
:data:`CONNECTOR_PARTITIONS` of the asset ``lakesync_connectors`` (built in
:mod:`assets.connector_assets`); the sensor of :mod:`sensors.connectors` keeps the partitions
in step with the config store and launches :data:`CONNECTOR_JOB` for a partition when its
connector's cron comes due. A manual run is a materialisation of one partition from the UI.
"""

import dagster as dg

__all__ = [
    "CONNECTOR_JOB",
    "CONNECTOR_PARTITIONS",
    "connector_key",
    "split_connector_key",
]

CONNECTOR_PARTITIONS = dg.DynamicPartitionsDefinition(name="lakesync_connectors")
"""One partition per registered connector: ``<gateway>/<connector>``."""
CONNECTOR_JOB = "lakesync_connector_polls"
"""The job that polls one connector (one partition) per run."""


def connector_key(gw: str, name: str) -> str:
    """The partition key of connector ``name`` of gateway ``gw``."""
    return f"{gw}/{name}"


def split_connector_key(key: str) -> tuple[str, str]:
    """``(gw, name)`` of a partition key."""
    gw, _, name = key.partition("/")
    return gw, name
