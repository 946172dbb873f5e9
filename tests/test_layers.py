"""The layers of the code (.importlinter): no package imports upward, no import circles."""

from __future__ import annotations

import configparser
import logging
import os
from pathlib import Path

import importlinter.cli

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".importlinter"


def test_every_contract_is_kept(capsys):
    # lint_imports configures logging with dictConfig, which disables every logger that
    # exists then (egrl's among them): later tests in this process that read caplog would
    # see nothing, so the loggers it disabled are enabled again.
    loggers = [
        lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    enabled = [lg for lg in loggers if not lg.disabled]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        status = importlinter.cli.lint_imports(config_filename=str(CONFIG))
    finally:
        os.chdir(cwd)
        for lg in enabled:
            lg.disabled = False
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
