"""A benchmark's own PostgreSQL database: created fresh and migrated, dropped afterwards."""

from __future__ import annotations

ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"


def admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


def fresh_database(name: str) -> None:
    """Drop and create `name`, then migrate it (DATABASE_URL must already point at it)."""
    drop_database(name)
    admin(f"CREATE DATABASE {name}")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def drop_database(name: str) -> None:
    admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
