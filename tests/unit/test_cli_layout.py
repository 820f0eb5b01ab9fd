"""The CLI's layout (issue #32): each command's module declares its own flags next to its
code, the parser loads only the chosen command's module, and the tools never reach into
the CLI's helpers."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qlsched.cli import COMMANDS, build_parser, chosen_command

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_module_declares_and_runs_itself(name: str) -> None:
    """Every listed command's module has ``add_arguments`` and ``main``."""
    module = importlib.import_module(COMMANDS[name][0])
    assert callable(module.add_arguments)
    assert callable(module.main)


def test_the_chosen_command_is_the_first_word() -> None:
    """Options before it are skipped; an unknown word chooses nothing (argparse says so)."""
    assert chosen_command(["--help"]) is None
    assert chosen_command(["edge", "run", "--db", "x"]) == "edge"
    assert chosen_command(["nonsense", "run"]) is None


PROBE = """
import json, sys
from qlsched.cli import build_parser
build_parser("next").parse_args(["next", "* * * * *"])
print(json.dumps(sorted(sys.modules)))
"""


def test_parsing_one_command_loads_no_other() -> None:
    """Parsing ``next`` in a fresh interpreter imports no other command's module, nor
    asyncpg: a command's flags cost only its own imports."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    modules = json.loads(result.stdout)
    others = {m for n, (m, _) in COMMANDS.items() if n != "next"}
    assert [m for m in modules if m in others or m == "asyncpg"] == []


def test_the_full_parser_knows_every_flag() -> None:
    """With every command's flags (what ``--help`` tests read), ``run`` takes a config
    flag and ``edge run`` its budget."""
    parser = build_parser()
    assert parser.parse_args(["run", "--claim-budget", "8"]).claim_budget == 8
    assert parser.parse_args(["edge", "run", "--claim-budget", "8"]).claim_budget == 8


def test_the_tools_never_import_the_cli() -> None:
    """No module of ``qlsched/tools`` imports ``qlsched.commands`` or ``qlsched.cli``: the
    tools' entry points live in ``commands/``, not the other way round."""
    offenders = [
        str(p.relative_to(REPO))
        for p in (REPO / "qlsched" / "tools").rglob("*.py")
        if "qlsched.commands" in (text := p.read_text(encoding="utf-8")) or "qlsched.cli" in text
    ]
    assert offenders == []
