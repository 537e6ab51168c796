"""Destinations and sources: the `Destination` port and the SQL adapters (Postgres, MySQL/MariaDB,
SQLite)."""
