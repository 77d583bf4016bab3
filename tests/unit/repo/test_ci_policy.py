"""tests/conftest.py: with CI=true a skip fails unless the test says it cannot run here."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[2] / "conftest.py"

TESTS = """
import pytest

def test_skips():
    pytest.skip("the lab is not up")

@pytest.mark.cannot_run_here("no GPU on these machines")
def test_cannot_run_here():
    pytest.skip("needs a GPU")

def test_passes():
    assert 1 + 1 == 2
"""


def run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_policy.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rA",
            "-p",
            "no:cacheprovider",
            "-o",
            "markers=cannot_run_here(reason): test",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_outside_ci_skips_stay_skips(tmp_path):
    proc = run(tmp_path, None)
    assert proc.returncode == 0, proc.stdout
    assert "1 passed, 2 skipped" in proc.stdout


def test_in_ci_a_skip_fails_unless_the_test_cannot_run_here(tmp_path):
    proc = run(tmp_path, "true")
    assert proc.returncode == 1, proc.stdout
    assert "FAILED test_policy.py::test_skips" in proc.stdout
    assert "skipped with CI=true, which counts as a failure: the lab is not up" in proc.stdout
    assert "SKIPPED [1] test_policy.py" in proc.stdout and "needs a GPU" in proc.stdout
    assert "1 failed, 1 passed, 1 skipped" in proc.stdout


# --- size limits (issue 43): thin modules, short files and functions -------------------
# A file past them is a concept asking for a file of its own (DEVELOPERS' "one home per
# concept"); these checks keep them from creeping back.
ROOT = Path(__file__).resolve().parents[3]
MAX_FILE_LINES = 600  # any .py file under plugins/ (but plugins/modules/) and bai_cli/
MAX_MODULE_CODE_LINES = 150  # a module of plugins/modules/, outside its documentation
MAX_FUNCTION_LINES = 80  # any function or method under plugins/ and bai_cli/, def to end

MODULE_DOCS = ("DOCUMENTATION", "EXAMPLES", "RETURN")


def python_files(*folders: str) -> list[Path]:
    found = []
    for folder in folders:
        found += [p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(found)


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def module_code_lines(source: str) -> int:
    """Lines of a module that are code: not blank, not a comment, not a docstring (or
    another string statement of the module), not DOCUMENTATION, EXAMPLES or RETURN."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in tree.body:
        docs = isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id in MODULE_DOCS for target in node.targets
        )
        text = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if docs or (text and isinstance(node.value.value, str)):  # type: ignore[attr-defined]
            skip.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                skip.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return sum(
        1
        for number, line in enumerate(source.splitlines(), 1)
        if number not in skip and line.strip() and not line.strip().startswith("#")
    )


def function_lines_of(source: str) -> dict[str, int]:
    """Every function and method of a source: "qualified.name" -> its lines."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found[name] = (child.end_lineno or child.lineno) - child.lineno + 1
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def over(what: str, sizes: dict[str, int], limit: int) -> None:
    """Fail, naming each one, where a size is over ``limit``."""
    problems = [
        f"{key}: {size} {what} (the limit is {limit})"
        for key, size in sorted(sizes.items())
        if size > limit
    ]
    assert not problems, "\n".join(problems)


def test_no_file_is_longer_than_the_limit():
    files = [
        path
        for path in python_files("plugins", "bai_cli")
        if not relative(path).startswith("plugins/modules/")
    ]
    sizes = {relative(path): len(path.read_text(encoding="utf-8").splitlines()) for path in files}
    over("lines", sizes, MAX_FILE_LINES)


def test_no_module_has_more_code_than_the_limit():
    sizes = {
        relative(path): module_code_lines(path.read_text(encoding="utf-8"))
        for path in python_files("plugins/modules")
    }
    over("code lines outside DOCUMENTATION, EXAMPLES and RETURN", sizes, MAX_MODULE_CODE_LINES)


def test_no_function_is_longer_than_the_limit():
    sizes: dict[str, int] = {}
    for path in python_files("plugins", "bai_cli"):
        text = path.read_text(encoding="utf-8")
        sizes.update({f"{relative(path)}:{k}": v for k, v in function_lines_of(text).items()})
    over("lines", sizes, MAX_FUNCTION_LINES)


def test_the_size_checks_count_what_they_say():
    source = '''"""Doc."""
DOCUMENTATION = r"""
a: b
"""

# a comment
import os


def main() -> None:
    """Its docstring,
    two lines."""

    print(os.sep)  # code
'''
    assert module_code_lines(source) == 3
    assert function_lines_of(source) == {"main": 5}
    with pytest.raises(AssertionError, match=r"c.py: 5 lines \(the limit is 1\)"):
        over("lines", {"c.py": 5, "d.py": 1}, 1)
    over("lines", {"d.py": 1}, 1)
