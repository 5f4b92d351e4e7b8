"""The layering contract (pyproject.toml's [tool.importlinter], checked by import-linter), the floors
docs/architecture.md draws, and the 500-line cap of every module."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from tests.conftest import ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
MAX_LINES = 500


def contract_floors() -> list[str]:
    """The floors of the layers contract, top to bottom, each as 'a | b'."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (floors,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return floors["layers"]


def lint_imports(cwd: Path, config: Path) -> subprocess.CompletedProcess:
    if not LINT_IMPORTS.exists():
        pytest.skip(f"import-linter is not installed ({LINT_IMPORTS} missing): run make install")
    env = dict(os.environ, PYTHONPATH=str(cwd), NO_COLOR="1")
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def broken_part(output: str) -> str:
    """The report's 'Broken contracts' section: which module imports which, at which line."""
    _, found, rest = output.partition("Broken contracts")
    return (found + rest).strip() if found else output[-3000:]


def test_every_import_points_down_the_floors():
    result = lint_imports(ROOT, ROOT / "pyproject.toml")
    assert result.returncode == 0, "an import goes up a floor:\n" + broken_part(result.stdout + result.stderr)
    assert "floors KEPT" in result.stdout


def test_an_import_that_goes_up_a_floor_is_named_with_its_line(tmp_path):
    """The contract catches an upward arrow: a copy of the floors on a package whose core imports run."""
    package = tmp_path / "distbench"
    for floor in contract_floors():
        for name in floor.split(" | "):
            (package / name).mkdir(parents=True)
            (package / name / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "run" / "launchers.py").write_text("LAUNCHERS = {}\n")
    (package / "core" / "strategies.py").write_text("import os\nfrom distbench.run.launchers import LAUNCHERS\n")
    config = tmp_path / "pyproject.toml"
    config.write_text((ROOT / "pyproject.toml").read_text())
    result = lint_imports(tmp_path, config)
    report = broken_part(result.stdout + result.stderr)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "distbench.core is not allowed to import distbench.run" in report
    assert "distbench.core.strategies -> distbench.run.launchers (l.2)" in report


def doc_floors() -> list[str]:
    """The floors docs/architecture.md draws: the lines of its first code block that start with a folder
    (`name/` or `name.py`), each floor's folders joined by ' | '."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"^```\n(.*?)^```", text, re.S | re.M).group(1)
    floors = []
    for line in block.splitlines():
        head = re.match(r"^((?:\w+(?:/|\.py))(?: \| \w+(?:/|\.py))*)(?:\s|$)", line)
        if head:
            floors.append(" | ".join(re.sub(r"(/|\.py)$", "", n) for n in head.group(1).split(" | ")))
    return floors


def test_the_architecture_doc_draws_the_contracts_floors():
    assert doc_floors() == contract_floors()


def test_every_floor_is_a_folder_or_module_of_distbench_and_every_one_has_a_floor():
    names = [n for floor in contract_floors() for n in floor.split(" | ")]
    package = ROOT / "distbench"
    present = {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    present |= {p.stem for p in package.glob("*.py") if p.name != "__init__.py"}
    assert sorted(names) == sorted(present)


def test_every_module_has_at_most_500_lines():
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in (ROOT / "distbench").rglob("*.py")}
    assert len(lengths) > 100
    assert {path: n for path, n in lengths.items() if n > MAX_LINES} == {}


def test_every_registry_entry_names_a_launcher_that_exists():
    """core/strategies.py names launchers by key (it imports nothing from run/); run/launchers.py maps the keys."""
    from distbench.core.strategies import STRATEGIES
    from distbench.run.launchers import LAUNCHERS, TORCHRUN, cluster_launcher, launcher_for

    keys = {s.launcher for s in STRATEGIES.values()} | {s.multi_node for s in STRATEGIES.values() if s.multi_node}
    assert keys <= set(LAUNCHERS)
    assert all(LAUNCHERS[name].name == name for name in LAUNCHERS)
    ddp = STRATEGIES["ddp"]
    assert launcher_for(ddp, 1) is TORCHRUN and launcher_for(ddp, 2) is TORCHRUN and cluster_launcher(ddp) is TORCHRUN
    assert cluster_launcher(STRATEGIES["torch"]) is None


def test_no_two_modules_import_each_other_even_inside_a_function():
    """No import cycle between modules: every import counts, a function's own included (grimp reads them all)."""
    import grimp

    graph = grimp.build_graph("distbench")
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported != module and graph.find_shortest_chain(importer=imported, imported=module):
                cycles.append(f"{module} -> {imported} -> ... -> {module}")
    assert not cycles, "\n".join(cycles)
