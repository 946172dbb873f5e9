"""One module per study: no study imports another study, and every study reads run
directories through :mod:`egrl.rundir`.

A study module is one a plan under ``configs/study/`` names (``studies.runner.study_module``);
the modules the studies share are listed in ``studies.SHARED``. Every module of the
package is one or the other; a study imports shared modules only (at the top or inside a
function), and a shared module imports no study, so that no study reaches another through
a shared one. And no module of the package opens a run directory's files
(``metrics.csv``, ``evaluations.csv``, ``best_mapping.json``) by their names: the files'
one reader is :class:`egrl.rundir.RunDir`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import studies
from studies import runner

PACKAGE = Path(studies.__file__).resolve().parent
#: the names of a run directory's files, as a study would spell them to open one
RUN_FILES = re.compile(r"(^|/)(metrics\.csv|evaluations\.csv|best_mapping\.json)$")


def module_names() -> list[str]:
    """Every module directly under ``studies/`` (``__init__`` aside)."""
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def study_names() -> set[str]:
    """The modules the plans name (their ``study`` key, dotted names outside the package
    aside)."""
    names = {str(runner.load_plan(plan).study) for plan in runner.study_names()}
    return {n.replace("-", "_") for n in names if "." not in n}


def imported_studies_modules(source: str) -> set[str]:
    """The modules of ``studies`` that ``source`` imports, anywhere in the file:
    ``import studies.X``, ``from studies import X``, ``from studies.X import ...`` and
    relative imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("studies.")}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if (node.level, module) in ((0, "studies"), (1, "")):
                found |= {a.name for a in node.names}
            elif node.level == 0 and module.startswith("studies."):
                found.add(module.split(".")[1])
            elif node.level == 1:
                found.add(module.split(".")[0])
    return found


def imports_of(name: str) -> set[str]:
    """The modules of ``studies`` that the module ``name`` imports (itself aside)."""
    source = (PACKAGE / f"{name}.py").read_text(encoding="utf-8")
    return (imported_studies_modules(source) & set(module_names())) - {name}


def test_the_finder_sees_every_spelling_of_an_import():
    source = (
        "import studies.peers\n"
        "from studies import screening, render\n"
        "from studies.mbo import thing\n"
        "def f():\n"
        "    from .llm import other\n"
        "    from . import noise\n"
        "import numpy\n"
        "from egrl.runs import Run\n"
    )
    assert imported_studies_modules(source) == {
        "peers",
        "screening",
        "render",
        "mbo",
        "llm",
        "noise",
    }


def test_every_module_is_a_study_or_shared():
    shared, plans = set(studies.SHARED), study_names()
    assert not shared & plans, f"shared and a study at once: {sorted(shared & plans)}"
    assert shared <= set(module_names()), f"no such module: {sorted(shared - set(module_names()))}"
    loose = set(module_names()) - shared - plans
    assert not loose, f"neither a study (no plan names it) nor in studies.SHARED: {sorted(loose)}"


@pytest.mark.parametrize("name", sorted(study_names()))
def test_a_study_imports_no_other_study(name):
    others = imports_of(name) - set(studies.SHARED)
    assert not others, f"studies/{name}.py imports the studies {sorted(others)}"


@pytest.mark.parametrize("name", sorted(studies.SHARED))
def test_a_shared_module_imports_no_study(name):
    found = imports_of(name) & study_names()
    assert not found, f"studies/{name}.py (shared) imports the studies {sorted(found)}"


@pytest.mark.parametrize("name", module_names())
def test_run_directories_are_read_through_rundir(name):
    """No code of the package names a run directory's file (docstrings and comments may)."""
    tree = ast.parse((PACKAGE / f"{name}.py").read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    named = [
        f"line {node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and RUN_FILES.search(node.value)
    ]
    assert not named, f"studies/{name}.py opens run files by name: {named}"
