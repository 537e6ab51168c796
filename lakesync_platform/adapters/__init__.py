"""Destinations and sources: SQL adapters (Postgres, MySQL/MariaDB, SQLite)."""
