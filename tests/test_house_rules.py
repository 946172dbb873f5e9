"""The house's rules, checked by the test suite: ruff's lint and format, and the imports
made inside functions in ``egrl/``.

An import inside a function body of ``egrl/``:

* never imports again a module, or a name of a module, that the file imports at its top
  level (imports under ``if TYPE_CHECKING:`` do not run and do not count): it uses the
  top-level name;
* says why it is not at the top, as a comment at the end of its line (the first line of a
  wrapped import) that starts with one of :data:`REASONS`; a short explanation may follow
  (``# start-up time: matplotlib, at the end``), and so may a ``# noqa`` comment:

  - ``optional dependency``: a package not in ``install_requires`` (``setup.cfg``):
    optuna, smac, nevergrad, ray, tensorboard, mlflow, umap, transformers, onnxscript...
  - ``start-up time``: a heavy module (scipy.stats, scikit-learn, matplotlib,
    torch_geometric, or omegaconf in the modules ``import egrl`` loads...) deferred so
    that a command, or ``import egrl``, starts fast;
  - ``import cycle``: an import at the top would make a circular import.

Any other import goes to the top of its file.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "egrl"

#: why an import may stay inside a function (see the module docstring)
REASONS = ("optional dependency", "start-up time", "import cycle")
_REASON = re.compile(rf"^({'|'.join(re.escape(r) for r in REASONS)})\b")


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _fail_on(out: subprocess.CompletedProcess) -> None:
    """Fail the test with ruff's own report when ruff found something."""
    if out.returncode != 0:
        pytest.fail(
            f"ruff {' '.join(out.args[3:])}:\n{out.stdout[-8000:]}{out.stderr[-2000:]}", False
        )


def test_ruff_check_passes():
    """``ruff check`` finds nothing (``ruff check --fix FILE`` fixes most)."""
    _fail_on(_ruff("check", "."))


def test_ruff_format_check_passes():
    """Every file is as ``ruff format`` writes it (``ruff format FILE`` does it)."""
    _fail_on(_ruff("format", "--check", "."))


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_of(node: ast.ImportFrom, package: str) -> str:
    """The absolute module of ``from ... import``, relative imports resolved."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> tuple[set[str], set[str]]:
    """(modules, dotted names) an import statement reads: ``import a.b`` -> ({a.b}, {});
    ``from a import b`` -> ({a}, {a.b}) (``b`` may be a module or a name in ``a``)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}, set()
    module = _module_of(node, package)
    return {module}, {f"{module}.{a.name}" for a in node.names}


def _top_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported (not in functions or classes,
    not under ``if TYPE_CHECKING:``)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _top_level_imports(node.body)
            yield from _top_level_imports(node.orelse)
        elif isinstance(node, (ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                yield from _top_level_imports(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from _top_level_imports(handler.body)


def _function_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import inside a function body (nested functions and classes included), in
    the order of the file, each once."""
    found: dict[tuple[int, int], ast.Import | ast.ImportFrom] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    found[(inner.lineno, inner.col_offset)] = inner
    return [found[key] for key in sorted(found)]


def _comments(source: str) -> dict[int, str]:
    """Line number -> the comment on that line."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string
    return out


def _gives_a_reason(comment: str) -> bool:
    """Whether one of the comment's ``#`` parts starts with a reason of :data:`REASONS`."""
    return any(_REASON.match(part.strip()) for part in comment.split("#"))


def import_problems(source: str, module: str, where: str) -> list[str]:
    """``where:LINE: ...`` for each import inside a function of ``source`` (the module
    named ``module``) that breaks a rule of the module docstring."""
    tree = ast.parse(source)
    package = module if where.endswith("__init__.py") else module.rpartition(".")[0]
    top_modules: set[str] = set()
    for node in _top_level_imports(tree.body):
        modules, names = _imported(node, package)
        top_modules |= modules | names
    comments = _comments(source)
    problems = []
    for node in _function_imports(tree):
        line = ast.get_source_segment(source, node).splitlines()[0]
        modules, names = _imported(node, package)
        again = sorted((modules | names) & top_modules)
        if again:
            problems.append(
                f"{where}:{node.lineno}: {line}: the top of the file imports "
                f"{', '.join(again)} already: use that name"
            )
        lines = range(node.lineno, (node.end_lineno or node.lineno) + 1)
        if not any(_gives_a_reason(comments.get(n, "")) for n in lines):
            problems.append(
                f"{where}:{node.lineno}: {line}: end the line with # "
                + " or # ".join(REASONS)
                + " (or move the import to the top of the file)"
            )
    return problems


def _egrl_sources() -> Iterator[tuple[Path, str]]:
    """Every ``.py`` file of ``egrl/`` and its module's dotted name."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield path, ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_import_in_a_function_of_egrl_says_why_and_repeats_none():
    """The rules of the module docstring, on every ``.py`` file of ``egrl/``."""
    problems = []
    for path, module in _egrl_sources():
        where = str(path.relative_to(ROOT))
        problems += import_problems(path.read_text(encoding="utf-8"), module, where)
    assert not problems, "\n".join(problems)


EXAMPLE = """
from typing import TYPE_CHECKING

import json
from egrl.env import Env

if TYPE_CHECKING:
    from egrl.ledger import Ledger


def f():
    import json
    from egrl.env import make_env  # start-up time
    from egrl.ledger import Ledger  # import cycle: egrl.ledger imports this module
    import optuna  # optional dependency  # noqa: F401
    import numpy as np
    from . import sibling  # start-up time: a long reason
    from .env import reward_of  # start-up timer

    def g():
        import ray  # optional dependency, only for runtime=ray
"""


@pytest.mark.parametrize(
    "line, why",
    [
        (12, "imports json already"),
        (12, "end the line with"),
        (13, "imports egrl.env already"),
        (16, "end the line with"),
        (18, "imports egrl.env already"),
        (18, "end the line with"),
    ],
)
def test_the_import_rule_finds(line, why):
    problems = import_problems(EXAMPLE, "egrl.example", "egrl/example.py")
    assert any(p.startswith(f"egrl/example.py:{line}: ") and why in p for p in problems), problems


def test_the_import_rule_accepts_a_reason_and_a_type_checking_name():
    problems = import_problems(EXAMPLE, "egrl.example", "egrl/example.py")
    lines = {int(p.split(":")[1]) for p in problems}
    assert lines == {12, 13, 16, 18}, problems
    # ``from . import sibling`` in egrl/example.py is egrl.sibling: not imported at the top
    assert not any("egrl.sibling" in p for p in problems)


@pytest.mark.slow
def test_egrl_train_starts_without_pytorch_geometric_or_scipy_stats():
    """``egrl-train``'s module loads neither PyG nor scipy.stats (seconds of start-up):
    a refused command line answers fast, and a run without a GNN never loads PyG."""
    heavy = ("torch_geometric", "scipy.stats")
    code = f"import sys, egrl.cli.train; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"
