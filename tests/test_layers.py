"""The layers of the code (.importlinter): no package imports upward, no import circles."""

from __future__ import annotations

import configparser
import os
from pathlib import Path

import importlinter.cli

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".importlinter"


def test_every_contract_is_kept(capsys):
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        status = importlinter.cli.lint_imports(config_filename=str(CONFIG))
    finally:
        os.chdir(cwd)
    assert status == 0, capsys.readouterr().out[-4000:]


def test_every_module_of_egrl_has_a_layer():
    """A new module at the top of egrl must be given its layer in the contract."""
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    layers = parser["importlinter:contract:egrl"]["layers"]
    listed = {name.strip() for line in layers.split("\n") for name in line.split(":")} - {""}
    modules = {
        p.stem if p.suffix == ".py" else p.name
        for p in (ROOT / "egrl").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert modules - listed == set()
