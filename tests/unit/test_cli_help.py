"""Every command and every option of ``python -m qlsched`` explains itself in ``--help``."""

from __future__ import annotations

import argparse

from qlsched.cli import build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_every_option_of_every_command_has_help() -> None:
    missing = [
        f"{name} {action.option_strings or action.dest}"
        for name, sub in _subparsers(build_parser()).items()
        for action in sub._actions
        if not isinstance(action, argparse._HelpAction) and not action.help
    ]
    assert missing == []
