"""lcr's packages in layers: a module imports only its own package or a lower layer.

Every ``import`` in every lcr module counts, including those inside functions (a lazy
import is still a dependency). The order, lowest first, and why each sits where it does:

  errors, _native, _cuda   the user-error type; the compiled engines (they import nothing)
  atomic, guards, redact,  small utilities over errors: atomic writes, up-front checks,
  sharegpt, cuda           secrets in URLs, the ShareGPT record reader, the CUDA engines
  traces                   Trace, readers, generators, next-use: numpy only (``LIGHT``)
  policies                 the item-cache spec: the standard library only
  predict                  predictors, the online model, its service, the back-off rule
  sim                      the item-cache simulator: replay, sweeps, prediction arrays, plots
  kv | embedding | moe     the other caches, each on top of the simulator's pieces
    | checkpoints          (independent of one another)
  lpc                      learned prefix caching: radix policies (kv's protocol), its workload
  route                    routing over radix-cache workers (kv), LPC's chat workload
  integrations             SGLang and the serving path, over everything below
  commands                 ``lcr.cli`` and every package's command module (``cli``, ``*_cli``):
                           each composes the layers below for one subcommand, e.g. imports
                           LPC and the SGLang engine so that they register themselves
  __main__                 ``python -m lcr``

Packages in one layer are independent: none imports another. Inside ``lcr.kv`` the
engines (the tree, the registry of policies and engines, the replay, its plots) sit above
its policies and workloads, so a radix policy never builds the tree that runs it.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

LCR = Path(__file__).resolve().parents[1] / "lcr"

LAYERS: tuple[frozenset[str], ...] = tuple(map(frozenset, (
    {"errors", "_native", "_cuda"},
    {"atomic", "guards", "redact", "sharegpt", "cuda"},
    {"traces"},
    {"policies"},
    {"predict"},
    {"sim"},
    {"kv", "embedding", "moe", "checkpoints"},
    {"lpc"},
    {"route"},
    {"integrations"},
    {"commands"},
    {"__main__"},
)))

#: Packages kept light: the only packages outside the standard library they may import.
LIGHT = {"traces": frozenset({"numpy", "zstandard"}),  # zstandard: optional .zst decompression
         "policies": frozenset()}                        # the spec runs anywhere Python does

#: Inside one package: (package, its upper modules). Its other modules may not import them.
UPPER_MODULES = {"kv": frozenset({"tree", "registry", "sim", "plot"})}

#: Known upward imports being removed, as (importing module, imported module). This list
#: only shrinks: an entry whose import is gone fails the test until it is deleted.
ALLOWED: frozenset[tuple[str, str]] = frozenset()


def module_name(path: Path, root: Path = LCR) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path = LCR):
    """``(line, module)`` for every import in the file at ``path``, relative ones resolved;
    ``from lcr.kv import tree`` names the module ``lcr.kv.tree``."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            folder = root.parent.joinpath(*base.split("."))
            for alias in node.names:
                submodule = (folder / f"{alias.name}.py").exists() or (folder / alias.name).is_dir()
                yield node.lineno, f"{base}.{alias.name}" if submodule or base == root.name else base


def unit(module: str) -> str:
    """What a module is layered as: ``commands`` for a command module, else its package."""
    parts = module.split(".")
    if module == "lcr.cli" or len(parts) > 2 and (parts[-1] == "cli" or parts[-1].endswith("_cli")):
        return "commands"
    return parts[1]


def _layer(package: str) -> int:
    for number, members in enumerate(LAYERS):
        if package in members:
            return number
    raise AssertionError(f"lcr.{package} is in no layer: add it to LAYERS in tests/test_layers.py")


def upward_imports(root: Path = LCR) -> list[tuple[str, int, str, str]]:
    """``(module, line, imported module, why)`` for every import that is not downward."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        parts = module.split(".")
        if len(parts) == 1:
            continue  # the package facade (lcr/__init__.py) loads its names lazily, by name
        for line, target in imported_modules(path, root):
            tparts = target.split(".")
            if tparts[0] != root.name or len(tparts) == 1:
                continue
            mine, theirs = unit(module), unit(target)
            if mine == theirs:
                upper = UPPER_MODULES.get(mine, frozenset())
                if len(parts) > 2 and len(tparts) > 2 and tparts[2] in upper and parts[2] not in upper:
                    found.append((module, line, target, f"lcr.{mine}.{tparts[2]} is above lcr.{mine}.{parts[2]}"))
            elif _layer(theirs) > _layer(mine):
                found.append((module, line, target, f"{theirs} is above {mine}"))
            elif _layer(theirs) == _layer(mine):
                found.append((module, line, target, f"{theirs} and {mine} are independent"))
    return found


def heavy_imports(package: str, root: Path = LCR) -> list[tuple[str, int, str]]:
    """``(module, line, import)`` for each import of ``lcr.<package>`` beyond ``LIGHT``."""
    return [(module_name(path, root), line, target)
            for path in sorted((root / package).rglob("*.py"))
            for line, target in imported_modules(path, root)
            if target.split(".")[0] not in {root.name, *sys.stdlib_module_names, *LIGHT[package]}]


def test_every_import_points_down():
    upward = [(m, line, t, why) for m, line, t, why in upward_imports() if (m, t) not in ALLOWED]
    assert not upward, "imports that run back up:\n" + "\n".join(
        f"  {m.replace('.', '/')}.py:{line}: imports {t} ({why})" for m, line, t, why in upward)


def test_the_allow_list_only_shrinks():
    present = {(m, t) for m, _, t, _ in upward_imports()}
    assert not ALLOWED - present, f"fixed, delete from ALLOWED: {sorted(ALLOWED - present)}"


@pytest.mark.parametrize("package", sorted(LIGHT))
def test_traces_need_numpy_only_and_policies_nothing(package):
    assert not heavy_imports(package), heavy_imports(package)


def test_a_planted_heavy_import_is_named(tmp_path):
    root = _package(tmp_path / "lcr", {"__init__.py": "", "policies/__init__.py": "import heapq\n",
                                       "policies/lru.py": "def f():\n    import numpy as np\n"})
    assert heavy_imports("policies", root) == [("lcr.policies.lru", 2, "numpy")]


def test_every_package_has_a_layer():
    for path in LCR.rglob("*.py"):
        if "." in module_name(path):
            _layer(unit(module_name(path)))


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("source, line, target", [
    ("from lcr.sim.runner import replay\n", 1, "lcr.sim.runner"),                     # at module level
    ("import numpy\n\ndef f():\n    import lcr.predict.base\n", 4, "lcr.predict.base"),  # inside a function
    ("def f():\n    from ..lpc import workload\n", 2, "lcr.lpc"),                        # relative
    ("from lcr import integrations\n", 1, "lcr.integrations"),                           # from the root
])
def test_a_planted_upward_import_is_named_with_its_line(tmp_path, source, line, target):
    root = _package(tmp_path / "lcr", {"__init__.py": "", "traces/__init__.py": "", "traces/gen.py": source,
                                       "errors.py": "", "sim/__init__.py": "", "lpc/__init__.py": ""})
    assert [(m, ln, t) for m, ln, t, _ in upward_imports(root)] == [("lcr.traces.gen", line, target)]


def test_peers_a_packages_upper_modules_and_commands_are_refused(tmp_path):
    root = _package(tmp_path / "lcr", {"__init__.py": "", "kv/__init__.py": "from lcr.kv import tree\n",
                                       "kv/shadow.py": "from lcr.kv import requests, tree\n",
                                       "kv/requests.py": "",
                                       "kv/tree.py": "from lcr.kv.shadow import Shadow\n",
                                       "kv/sim.py": "from lcr.kv.cli import main\n",
                                       "kv/cli.py": "import lcr.lpc.sim\nimport lcr.sim.cli\n",
                                       "moe/__init__.py": "from lcr.kv import policies\n"})
    # A command module may compose anything (kv/cli.py); nothing else may import one.
    assert {(m, t) for m, _, t, _ in upward_imports(root)} == {("lcr.kv.shadow", "lcr.kv.tree"),
                                                               ("lcr.kv.sim", "lcr.kv.cli"),
                                                               ("lcr.moe", "lcr.kv")}
