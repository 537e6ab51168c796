"""SQL sources (PostgreSQL, MySQL/MariaDB): the ``cursor`` strategy's stream and the URLs.

The ``diff`` strategy compares whole tables and runs as a Spark job
(:mod:`lakesync_platform.spark.connector_diff`).
"""
