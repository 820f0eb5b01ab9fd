"""Flags several commands share, for their ``add_arguments``: the config options (name,
type and help from ``core.config.FLAGS``) and the database options. Imports nothing heavy,
so declaring a command's flags never loads a driver."""

from __future__ import annotations

import argparse

from qlsched.core.config import BOUNDS, FLAGS, flag_of

DATABASE_OPTIONS = ("dsn", "pg_bindir", "data_dir")


def add_config_options(p: argparse.ArgumentParser, *names: str, **help: str) -> None:
    """Flags for config options: the name, type and help come from ``core.config.FLAGS``
    (``help`` overrides a text where a command reads the option differently)."""
    for name in names:
        text = help.get(name, FLAGS[name])
        if name in BOUNDS:
            p.add_argument(flag_of(name), type=int, help=text)
        else:
            p.add_argument(flag_of(name), help=text)


def add_database_options(p: argparse.ArgumentParser, *, role: str) -> None:
    """``--dsn`` (for ``role``), ``--config``, ``--pg-bindir`` and ``--data-dir``."""
    add_config_options(p, "dsn", dsn=f"PostgreSQL DSN ({role}); default: the local database")
    p.add_argument("--config", help="a TOML config file (also QLSCHED_CONFIG)")
    add_config_options(p, "pg_bindir", "data_dir")


def add_trigger_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("trigger", metavar="P/T", help="PROJECT/TRIGGER")


def add_actor_options(p: argparse.ArgumentParser, note: str) -> None:
    """``--note`` and ``--actor`` of the control commands, and their admin DSN options."""
    p.add_argument("--note", help=note)
    p.add_argument("--actor", help="who acts, recorded beside the database role")
    add_database_options(p, role="admin")


def add_overlap_option(p: argparse.ArgumentParser) -> None:
    """``--overlap allow``: a trigger-now or backfill request that ignores the trigger's
    overlap policy (by default the policy decides, as for cron's own occurrences)."""
    p.add_argument(
        "--overlap",
        choices=["allow"],
        default=None,
        help="admit whatever the trigger's overlap policy says (default: the policy decides)",
    )
