"""The results pages regenerated from the committed raw tables of data/runs/: the growth pages
(docs/method.md §10c) and a default run's page. Each page's generated parts are the printout of the
command its marker names, run on a data folder of data/runs/ (the results layout of
learnwin.infra.layout, data/runs/README.md).

    python experiments/data_pages.py collect RESULTS data/runs/NAME --config CONFIG  # keep a budget run's tables
    python experiments/data_pages.py write [PAGE ...]    # rewrite the generated parts (default: PAGES)
    python experiments/data_pages.py check [PAGE ...]    # exit 1 and print what differs

A generated part lies between ``<!-- generated: python experiments/SCRIPT.py ARGS -->`` and
``<!-- /generated -->``, SCRIPT one of :data:`SCRIPTS` (groundtruth_tables for the growth pages,
results_tables for a default run's); ``write`` runs ``SCRIPT.main(ARGS)`` and puts its output there.
``collect`` copies what the growth pages' commands read from a finished budget run: each (model,
seed)'s scores and envelope, its benchmark TSVs, the aggregate's tables but the scores (the jobs'
own, concatenated), and a record (run.yaml: the config's models and seeds, which the tables report
missing where the folder lacks them). A default run's tables are kept by ``python
experiments/results_tables.py RESULTS --keep data/runs/NAME``.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib.util
import io
import re
import shutil
import sys
from pathlib import Path

import yaml

from learnwin.infra import config as lwconfig
from learnwin.infra import layout

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("docs/results-growth.md", "docs/results-growth-T256.md", "docs/results-default-epyc-25-17.md")
#: The scripts whose printouts a page may embed.
SCRIPTS = ("groundtruth_tables", "results_tables")
MARKER = re.compile(rf"<!-- generated: python experiments/({'|'.join(SCRIPTS)})\.py (.*?) -->\n(.*?)<!-- /generated -->",
                    re.S)
#: Each (model, seed)'s tables the pages read (the window from the scores, claim (d)'s f(l) from
#: the envelope; kappa comes from the aggregate's network_alpha, so the snapshots' psi and total,
#: 0.8 MB a job, stay out) and the rules whose benchmark TSVs the cost table reads.
UNIT = {"scores": layout.BUDGET_RUN, "envelope": layout.BUDGET_SNAPSHOT["envelope"]}
JOB_RULES, SET_RULES = ("train_budget", "snapshot_budget"), ("aggregate_budget", "plot_budget")


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def printout(args: str, root: Path = ROOT, script: str = "groundtruth_tables") -> str:
    """What ``python experiments/SCRIPT.py ARGS`` prints, run from ``root``."""
    out = io.StringIO()
    with contextlib.chdir(root), contextlib.redirect_stdout(out):
        _script(script).main(args.split())
    return out.getvalue()


def regenerated(page: str, root: Path = ROOT) -> str:
    """``page`` with each generated part replaced by its command's printout."""
    return MARKER.sub(lambda m: f"<!-- generated: python experiments/{m[1]}.py {m[2]} -->\n"
                                f"{printout(m[2], root, m[1])}<!-- /generated -->", page)


def differences(path: Path, root: Path = ROOT) -> list[str]:
    """The unified diff between the page at ``path`` and its regeneration (empty: equal)."""
    have = path.read_text()
    if not MARKER.search(have):
        raise SystemExit(f"{path}: no generated part (<!-- generated: python experiments/SCRIPT.py ... -->)")
    want = regenerated(have, root)
    return list(difflib.unified_diff(have.splitlines(), want.splitlines(), f"{path} (page)",
                                     f"{path} (regenerated)", lineterm=""))


def collect(results: Path, dest: Path, config: Path) -> None:
    """Copy a finished budget run's tables (see the module docstring) from ``results`` into ``dest``."""
    cfg = lwconfig.load(ROOT, config)
    rec = cfg["recovery"]
    models = rec["models"] or cfg["models"]  # as workflow/rules/recovery.smk reads them
    copied = []
    for model in models:
        for seed in rec["seeds"]:
            fields = dict(optimizer=rec["optimizer"], model=model, seed=seed)
            paths = [*UNIT.values(), *(f"{layout.BENCH}/{rule}/{{optimizer}}/{{model}}/seed{{seed}}.tsv"
                                       for rule in JOB_RULES)]
            copied += [_copy(results, dest, p.format(**fields)) for p in paths]
    for name, path in layout.BUDGET.items():
        if name != "scores":
            copied.append(_copy(results, dest, path.format(seed_set="exploration")))
    copied += [_copy(results, dest, f"{layout.BENCH}/{rule}/exploration.tsv") for rule in SET_RULES]
    (dest / "run.yaml").write_text(yaml.safe_dump(dict(config=str(config), models=list(models),
                                                       seeds=[int(s) for s in rec["seeds"]]), sort_keys=False))
    kept = [p for p in copied if p is not None]
    print(f"{len(kept)} files into {dest} ({sum(p.stat().st_size for p in kept) / 1e6:.2f} MB); "
          f"not in {results}: {len(copied) - len(kept)}")


def _copy(results: Path, dest: Path, path: str) -> Path | None:
    """Copy the layout path ``path`` from the results folder into ``dest``; None when it is not there."""
    src, dst = layout.under(results, path), layout.under(dest, path)
    if not src.is_file():
        return None
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="copy a finished run's tables into a data folder")
    c.add_argument("results", type=Path)
    c.add_argument("dest", type=Path)
    c.add_argument("--config", type=Path, required=True, help="the run's config (its models and seeds)")
    for name in ("write", "check"):
        sub.add_parser(name).add_argument("pages", nargs="*", default=list(PAGES))
    args = ap.parse_args(argv)
    if args.command == "collect":
        collect(args.results, args.dest, args.config)
        return
    failed = False
    for page in args.pages:
        path = ROOT / page
        if args.command == "write":
            path.write_text(regenerated(path.read_text()))
        elif diff := differences(path):
            print("\n".join(diff))
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
