"""Import boundaries (docs/architecture.md): ``learnwin.infra`` reaches no higher stage, the
statistics import only infra, the probes ask the model instead of testing for a stack, and the
workflow starts without torch (the registry's metadata, docs/method.md §2a, is all the Snakefile
parse reads)."""

import ast
import os
import re
import shutil
from pathlib import Path

import yaml
from workflow_helpers import ROOT, copy_workflow, scheduled, snakemake

from learnwin.infra import resources

INFRA = ROOT / "learnwin" / "infra"
#: The stages above infra: it may import none of them.
ABOVE_INFRA = ("learnwin.models", "learnwin.probing", "learnwin.tasks")
#: What the statistics may not import: they stand beside models, on infra alone (and no torch).
BESIDE_STATS = ("learnwin.models", "learnwin.probing", "learnwin.recovery", "learnwin.report", "learnwin.plots",
                "learnwin.tasks", "torch")
#: What the tasks may not import: they stand on infra alone, below the models (and no torch).
ABOVE_TASKS = ("learnwin.models", "learnwin.probing", "learnwin.recovery", "learnwin.report", "learnwin.plots",
               "learnwin.stats", "torch")


def imported_names(source: str, package: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every import of ``source``, a module of ``package``: at any depth
    (function-level included), relative ones resolved, ``from a import b`` as ``a.b``, and
    ``importlib.import_module`` / ``__import__`` of a literal name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - node.level + 1] if node.level else [])
            base = ".".join(p for p in (base, node.module) if p)
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)):
            found.append((node.lineno, str(node.args[0].value)))
    return found


def reaching_up(folder: Path, package: str, forbidden: tuple[str, ...] = ABOVE_INFRA) -> list[str]:
    """``path:line name`` of every import of a module under ``folder`` (the package ``package``)
    of a package in ``forbidden``."""
    return [f"{path.name}:{line} {name}" for path in sorted(folder.glob("*.py"))
            for line, name in imported_names(path.read_text(), package)
            if any(name == stage or name.startswith(stage + ".") for stage in forbidden)]


#: What a test of a cell's kind reads: the retired ``transported_name`` and its values, and the
#: retired predicates on it.
KIND_WORDS = {"transported_name", "stacked", "linear_state"}
STATE_NAMES = {"hidden", "cell", "state", "stack"}


def kind_tests(paths) -> list[str]:
    """``path:line`` of every test of a cell's kind in the modules ``paths``: a name, attribute or
    string of :data:`KIND_WORDS`, or a comparison with a string of :data:`STATE_NAMES`."""
    found = []
    for path in sorted(paths):
        for node in ast.walk(ast.parse(path.read_text())):
            word = getattr(node, "id", getattr(node, "attr", getattr(node, "value", None)))
            compared = isinstance(node, ast.Compare) and any(
                isinstance(c, ast.Constant) and c.value in STATE_NAMES for c in [node.left, *node.comparators])
            if (isinstance(word, str) and word in KIND_WORDS) or compared:
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_infra_imports_no_higher_stage():
    assert len(list(INFRA.glob("*.py"))) >= 8
    assert reaching_up(INFRA, "learnwin.infra") == []


def test_the_check_finds_a_planted_import(tmp_path):
    """Each way of writing an import of models or probing is found, in a string and in a planted
    file of a copy of infra; names that only share a prefix are not."""
    planted = {
        "from learnwin.models.cells import build_model": "learnwin.models.cells.build_model",
        "import learnwin.probing.exact_transport as et": "learnwin.probing.exact_transport",
        "def width():\n    from ..probing import exact_transport": "learnwin.probing.exact_transport",
        "from .. import models": "learnwin.models",
        "import importlib\nimportlib.import_module('learnwin.models.cells')": "learnwin.models.cells",
    }
    for source, name in planted.items():
        assert name in [n for _, n in imported_names(source, "learnwin.infra")], source
    clean = "from learnwin.infra import registry\nfrom learnwin.modelsx import y\nfrom . import layout"
    assert [n for _, n in imported_names(clean, "learnwin.infra")] == [
        "learnwin.infra.registry", "learnwin.modelsx.y", "learnwin.infra.layout"]
    copy = shutil.copytree(INFRA, tmp_path / "infra", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "resources.py").write_text((copy / "resources.py").read_text()
                                       + "\n\ndef f():\n    from learnwin.probing import exact_transport\n")
    line = len((copy / "resources.py").read_text().splitlines())
    assert reaching_up(copy, "learnwin.infra") == [f"resources.py:{line} learnwin.probing.exact_transport"]


def test_stats_import_only_infra():
    """The statistics stand beside the models on infra alone: the ground truth's trainings are
    learnwin.recovery's, a stack's per-layer tables learnwin.stats.layers."""
    stats = ROOT / "learnwin" / "stats"
    assert len(list(stats.glob("*.py"))) >= 9
    assert reaching_up(stats, "learnwin.stats", BESIDE_STATS) == []


def test_models_and_probing_read_the_splits_without_the_tasks(tmp_path):
    """The models and the probes read a seed's splits through infra (learnwin.infra.io.load_split):
    neither imports learnwin.tasks (docs/architecture.md); a planted import is seen."""
    for floor in ("models", "probing"):
        folder = ROOT / "learnwin" / floor
        assert reaching_up(folder, f"learnwin.{floor}", ("learnwin.tasks",)) == []
    copy = tmp_path / "models"
    shutil.copytree(ROOT / "learnwin" / "models", copy)
    (copy / "train.py").write_text((copy / "train.py").read_text() + "\nfrom learnwin.tasks.splits import SPLITS\n")
    line = len((copy / "train.py").read_text().splitlines())
    assert reaching_up(copy, "learnwin.models", ("learnwin.tasks",)) == [f"train.py:{line} learnwin.tasks.splits.SPLITS"]


def test_tasks_import_only_infra():
    """The tasks stand beside the models on infra alone (docs/architecture.md): the data job and the
    config check draw and check a task without torch."""
    tasks = ROOT / "learnwin" / "tasks"
    assert len(list(tasks.glob("*.py"))) >= 3
    assert reaching_up(tasks, "learnwin.tasks", ABOVE_TASKS) == []


def test_probing_and_the_state_ask_the_cell_instead_of_testing_its_kind():
    """No probe and nothing of learnwin.models.state tests a cell's kind (docs/method.md §2a): the
    layout of z is each cell class's own methods."""
    probing = list((ROOT / "learnwin" / "probing").glob("*.py"))
    assert len(probing) >= 6
    assert kind_tests([*probing, ROOT / "learnwin" / "models" / "state.py"]) == []


def test_the_layer_checks_find_a_planted_fault(tmp_path):
    """A planted torch import in a copy of stats and planted tests of a cell's kind in copies of
    probing and of the state module are found; a name that only contains the word is not."""
    stats = shutil.copytree(ROOT / "learnwin" / "stats", tmp_path / "stats", ignore=shutil.ignore_patterns("__pycache__"))
    (stats / "window.py").write_text((stats / "window.py").read_text() + "\n\ndef f():\n    import torch\n")
    line = len((stats / "window.py").read_text().splitlines())
    assert reaching_up(stats, "learnwin.stats", BESIDE_STATS) == [f"window.py:{line} torch"]
    probing = shutil.copytree(ROOT / "learnwin" / "probing", tmp_path / "probing",
                              ignore=shutil.ignore_patterns("__pycache__"))
    source = (probing / "lyapunov.py").read_text()
    (probing / "lyapunov.py").write_text(source + "\n\ndef g(cell):\n    return unstacked(cell) or state.stacked(cell)\n")
    assert kind_tests(probing.glob("*.py")) == [f"lyapunov.py:{len(source.splitlines()) + 4}"]
    state = tmp_path / "state.py"
    source = (ROOT / "learnwin" / "models" / "state.py").read_text()
    state.write_text(source + "\n\ndef width(cell):\n    return 2 if cell.kind == 'cell' else 1\n")
    assert kind_tests([state]) == [f"state.py:{len(source.splitlines()) + 4}"]


def _without_torch(tmp_path: Path, *paths: Path) -> dict:
    """An environment whose ``import torch`` raises ImportError (a ``torch.py`` first on
    PYTHONPATH), with ``paths`` and the repository importable."""
    blocked = tmp_path / "no_torch"
    blocked.mkdir()
    (blocked / "torch.py").write_text('raise ImportError("torch is blocked: the parse must not need it")\n')
    path = [str(blocked), *map(str, paths), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def test_the_smoke_dry_run_parses_without_torch(tmp_path):
    """``snakemake -n`` of the smoke config with torch unimportable: the config check, the
    resources of every job and the rules' imports need none; the whole DAG is planned."""
    work = copy_workflow(tmp_path / "work")
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    jobs = scheduled(work, "--configfile", "config/smoke.yaml", env=_without_torch(tmp_path))
    runs = len(cfg["models"]) * len(cfg["optimizers"]) * len(cfg["seeds"])
    snapshots = runs * len(cfg["train"]["snapshot_epochs"])
    assert (jobs["make_data"], jobs["train_model"], jobs["take_snapshot"], jobs["compute_window"]) == (
        len(cfg["seeds"]), runs, snapshots, snapshots)


def test_a_users_cell_is_planned_without_torch(tmp_path, fresh_registry):
    """A user's cell whose registration (tests/toy_cell.py) names its class by path: the dry run
    with torch unimportable takes the toy as a model and sizes its jobs from the registry's
    metadata, the same requests as :mod:`learnwin.infra.resources` gives."""
    work = copy_workflow(tmp_path / "work")
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg.update(models=["toy", "lstm"], optimizers=["sgd"])
    cfg["model"].update(cells_module="toy_cell", hidden=256)  # a width that shows in mem_mb
    cfg["recovery"]["optimizer"] = "sgd"
    (work / "config" / "toy.yaml").write_text(yaml.safe_dump(cfg))
    out = snakemake(work, "-n", "--cores", "1", "--configfile", "config/toy.yaml",
                    env=_without_torch(tmp_path, ROOT / "tests")).stdout
    jobs = re.findall(r"rule train_model:.*?model=(\w+), seed=\d+\n\s+resources: .*?(?<!\w)mem_mb=(\d+)", out, re.S)
    requested = {model: int(mem) for model, mem in jobs}
    fresh_registry.load_cells("toy_cell")
    assert len(jobs) == 2 and requested == {m: resources.train_mem_mb(cfg, m) for m in ("toy", "lstm")}
    assert requested["lstm"] > requested["toy"]  # the LSTM's (h, c) doubles the activations
