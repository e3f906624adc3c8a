"""Run a budget-protocol config (docs/method.md §10b) seed by seed, keeping each finished
(model, seed)'s raw tables in the repository, so that a run longer than one sitting is finished
by the next, on this machine or another (docs/method.md §10d).

    python experiments/seed_by_seed.py CONFIG RUN [--cores 2] [--commit] [--estimate] [--until train_budget] [--hours H]
    python experiments/seed_by_seed.py CONFIG RUN --park [--commit]   # at a sitting's end, units still running

CONFIG: the run's config, read on top of config/config.yaml; RUN: its folder of raw tables
(e.g. data/runs/growth-T256), laid out as a run's results folder is (learnwin.infra.layout.under).
1. Prints the run's cost estimate (the training cost law, learnwin.infra.resources, at worst: every
   lag to N_max; the expected cost of the §10d power table for §10d's design; once units are kept,
   the time left at their measured mean, and at the shortest and the longest) and what is done.
2. Restores the finished units from RUN into the run's own work folder, seed_by_seed/<RUN's name>/
   in the repository's results folder (the repository's Snakefile, config, workflow and profiles
   linked in, its own results folder and .snakemake/), so that no other run's outputs at the same
   paths (another T, the same seeds) pass for this run's; their tables get fresh mtimes: Snakemake
   takes them as done.
3. The (model, seed) units not in RUN, in the config's order (seed by seed, the models of a seed
   in turn), N at a time (``--cores N``): each its own `snakemake --cores 1` on its outputs
   (train_budget, then snapshot_budget; Snakemake locks only the files a call makes, and the units
   share none), the next one started as one ends, so that no core waits for a seed's last job.
   As a unit ends, its tables, its benchmark TSVs and an entry of RUN/sittings.yaml (commit, CPU,
   seconds since the sitting began) are kept; with ``--commit``, one git commit per unit. A unit
   that fails stops the sitting once the running ones have ended and been kept. With ``--hours H``
   (a sitting of H hours: a session, a SLURM allocation), units start until the end of H, and the
   ones still running then are stopped and parked (below), each segment's wall and CPU seconds in
   its sittings entry (the Cost table of experiments/groundtruth_tables.py adds them to
   train_budget's): no core waits for the sitting's end, and a stopped unit loses only the training
   in flight. The next sitting goes on from the kept and the parked units.
4. When every unit is in: `snakemake recovery` (the aggregate and its figures) and the aggregate's
   tables and benchmark TSVs copied into RUN (with ``--commit``, one commit).
``--park`` (a sitting that must end while units run, the driver stopped from outside: no segment
seconds): each unfinished unit's resume state (its
finished trainings, learnwin.infra.resume) is copied from the work folder into RUN, beside where its
tables go, with a sittings entry (commit, CPU, trainings parked); step 2 restores it into the next
sitting's work folder, whose training goes on from it (the trainings' own seeds make each one
independent of the others, so a parked unit's tables are an unparked one's on one CPU; across two
CPUs, a unit's trainings come from both, as the sittings record says), and keeping the unit
removes it. ``--estimate`` stops after 1; ``--keep-from CHECKOUT`` keeps the units a run of the same config in
another checkout has finished (its results folder under it) and stops. ``--until train_budget`` (a run
whose readers need only the trainings' scores, as §10c's T 64 arm): a unit is its scores alone, and
no aggregate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from learnwin.infra import config as lwconfig
from learnwin.infra import layout, resources, resume
from learnwin.infra.provenance import commit_files, cpu_name, git_commit

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
LINKED = ("Snakefile", "config", "workflow", "profiles")  # a work folder's view of the repository
RULES = ("train_budget", "snapshot_budget")  # a unit's rules, in order; --until cuts after one
AGGREGATE_RULES = ("aggregate_budget", "plot_budget")  # the aggregate's, kept with its tables (the Cost table)
POLL_S = 5  # seconds between looks at the running units
POWER_T, POWER_MODELS = 256, ("const", "shared", "diag", "lstm")  # the design §10d's power table costs


def unit_tables(until: str | None = None) -> dict[str, str]:
    """A unit's raw tables (layout paths by name): its scores, and its snapshots unless ``until``."""
    return {"scores": layout.BUDGET_RUN, **({} if until else layout.BUDGET_SNAPSHOT)}


def unit_bench(until: str | None = None) -> dict[str, str]:
    """Its Snakemake benchmark TSVs, by rule."""
    rules = RULES[:RULES.index(until) + 1] if until else RULES
    return {rule: f"{layout.BENCH}/{rule}/{{optimizer}}/{{model}}/seed{{seed}}.tsv" for rule in rules}


def paths(template: dict, **fields) -> dict[str, str]:
    return {name: path.format(**fields) for name, path in template.items()}


def done(run: Path, fields: dict, until: str | None = None) -> bool:
    return all(layout.under(run, p).is_file() for p in paths(unit_tables(until), **fields).values())


def run_units(todo: list[dict], work: Path, options: list[str], workers: int, until: str | None,
              on_end: Callable[[dict], None], deadline: float | None = None,
              on_stop: Callable[[list], None] = lambda stopped: None) -> list[dict]:
    """Run each unit of ``todo`` as its own `snakemake --cores 1` call in ``work``, in order, at most
    ``workers`` at once, each started only before ``deadline``; ``on_end(unit)`` as each one ends.
    A failed call starts no further unit and raises once the running ones have ended (and ``on_end``
    has kept them). At ``deadline`` (epoch seconds) the running calls are stopped and ``on_stop`` gets
    [(unit, wall s, CPU s)] (:func:`stop`). Returns the units not started."""
    queue, running, failed = list(todo), [], None
    try:
        while True:
            while queue and len(running) < workers and failed is None and (deadline is None or time.time() < deadline):
                u = queue.pop(0)
                targets = list(paths(unit_tables(until), **u).values())
                running.append((u, subprocess.Popen([*SNAKEMAKE, *targets, *options, "--cores", "1"], cwd=work,
                                                    process_group=0), time.time()))
            if not running:
                break
            time.sleep(POLL_S)
            for u, call, start in [r for r in running if r[1].poll() is not None]:
                running.remove((u, call, start))
                if call.returncode:
                    failed = failed or subprocess.CalledProcessError(call.returncode, call.args)
                else:
                    on_end(u)
            if deadline is not None and time.time() >= deadline:
                if running:
                    on_stop(stop(running))
                break
    except KeyboardInterrupt:  # each call has its own process group: a terminal's Ctrl-C reaches the driver alone
        stop(running)
        raise
    if failed is not None:
        raise failed
    return queue


def stop(running: list[tuple]) -> list[tuple[dict, float, float]]:
    """Stop the running calls [(unit, Popen, start)]: SIGTERM to each call's process group (its own,
    :func:`run_units`), so that the job dies and Snakemake, which waits for its jobs, reaps it and
    exits; each call's wall seconds, and its CPU seconds (user + system, the job's included) from wait4."""
    for _, call, _ in running:
        os.killpg(call.pid, signal.SIGTERM)
    out = []
    for u, call, start in running:
        _, _, use = os.wait4(call.pid, 0)
        out.append((u, round(time.time() - start, 1), round(use.ru_utime + use.ru_stime, 1)))
    return out


def resume_state(u: dict) -> str:
    """The layout path of unit ``u``'s training's resume state (learnwin.infra.resume)."""
    return str(layout.resume_dir(layout.BUDGET_RUN.format(**u)) / resume.STATE)


def sitting_entry(run: Path, commit: str, u: dict, **fields) -> None:
    """Append unit ``u``'s entry (``commit``, its CPU, python and ``fields``) to RUN's sittings record."""
    line = dict(**u, commit=commit, cpu=cpu_name(), python=platform.python_version(), **fields)
    with open(run / layout.SITTINGS, "a") as fh:
        fh.write(yaml.safe_dump([line], sort_keys=False))


def park(work: Path, run: Path, units: list[dict], until: str | None, commit_it: bool,
         segments: dict | None = None) -> list[dict]:
    """Copy each unfinished unit's resume state from ``work`` into ``run`` (see the module docstring),
    with a sittings entry giving its trainings parked and, from ``segments`` ((model, seed) -> (wall s,
    CPU s), :func:`stop`), its sitting's segment's seconds; with ``commit_it``, one git commit."""
    parked, commit = [], git_commit(work)  # before the record changes: its first entry would make it "dirty"
    for u in units:
        rel = resume_state(u)
        if not done(run, u, until) and (work / rel).is_file():
            copy(work / rel, layout.under(run, rel))
            n = len(json.loads(layout.under(run, rel).read_text())["units"])
            seconds = (segments or {}).get((u["model"], u["seed"]))
            sitting_entry(run, commit, u, parked_trainings=n,
                          **(dict(parked_wall_s=seconds[0], parked_cpu_s=seconds[1]) if seconds else {}))
            parked.append(u)
    if commit_it and parked:
        commit_files(ROOT, [*(layout.under(run, resume_state(u)) for u in parked), run / layout.SITTINGS],
                     f"{run.name}: the finished trainings of {len(parked)} unfinished units, parked ({cpu_name()})")
    return parked


def restore(run: Path, work: Path, units: list[dict], until: str | None) -> None:
    """Copy the kept units' tables (scores before snapshots, so the snapshots are the newer) and the
    parked units' resume states from RUN into the work folder, where it lacks them."""
    for u in units:
        rels = paths(unit_tables(until), **u).values() if done(run, u, until) else [resume_state(u)]
        for rel in rels:
            if layout.under(run, rel).is_file() and not (work / rel).is_file():
                copy(layout.under(run, rel), work / rel)


def copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dst)


def work_folder(run: Path) -> Path:
    """The run's own Snakemake folder in the repository's results folder, the workflow linked in."""
    work = ROOT / layout.ROOT / "seed_by_seed" / run.name
    work.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        if (ROOT / name).exists() and not (work / name).is_symlink():
            (work / name).symlink_to(ROOT / name)
    return work


def keep(checkout: Path, run: Path, u: dict, sitting_s: float | None, commit_it: bool, until: str | None) -> None:
    """Copy unit ``u``'s tables and benchmark TSVs from ``checkout`` (a checkout whose run finished
    it) into ``run``, with its entry in the sittings record; with ``commit_it``, one git commit."""
    commit = git_commit(checkout)  # before the parked state's removal, a tracked change
    kept = [rel for rel in [*paths(unit_tables(until), **u).values(), *paths(unit_bench(until), **u).values()]
            if (checkout / rel).is_file()]
    for rel in kept:
        copy(checkout / rel, layout.under(run, rel))
    parked = layout.under(run, resume_state(u))
    was_parked = parked.is_file()
    parked.unlink(missing_ok=True)
    sitting_entry(run, commit, u, sitting_s=sitting_s)
    if commit_it:
        commit_files(ROOT, [*(layout.under(run, rel) for rel in kept), run / layout.SITTINGS, run / "run.yaml",
                            *([parked] if was_parked else [])],
                     f"{run.name}: raw tables of {u['model']} seed {u['seed']} ({cpu_name()})")


def unit_seconds(run: Path, units: list[dict], until: str | None = None) -> list[float]:
    """Each kept unit's seconds (its rules' benchmark TSVs summed; a unit without them is left out)."""
    import pandas as pd

    out = []
    for u in units:
        tsvs = [layout.under(run, p) for p in paths(unit_bench(until), **u).values()]
        if done(run, u, until) and all(t.is_file() for t in tsvs):
            out.append(sum(float(pd.read_csv(t, sep="\t")["s"].iloc[0]) for t in tsvs))
    return out


def estimate(cfg: dict, units: list[dict], run: Path, until: str | None, cores: int) -> None:
    models = sorted({u["model"] for u in units})
    worst = sum(resources.budget_cpu_seconds(cfg, u["model"]) for u in units) / 3600
    print(f"{len(units)} (model, seed) jobs of {', '.join(models)}; at worst (every lag to N_max, the cost "
          f"law): {worst:.0f} CPU h", flush=True)
    power = ROOT / layout.GROWTH_POWER
    if power.is_file() and cfg["task"]["T"] == POWER_T and models == sorted(POWER_MODELS):
        import pandas as pd

        table = pd.read_parquet(power)
        row = table[(table["noise"] == "calibrated") & (table["scenario"] == "log N")
                    & (table["n_max"] == cfg["recovery"]["budgets"][-1])]
        n_seeds = len({u["seed"] for u in units})
        row = row[row["seeds"] == n_seeds]
        if len(row):
            print(f"expected (docs/method.md §10d's power table, log-N cells): {row['cpu_h'].iloc[0]:.0f} CPU h, "
                  f"{row['cpu_h'].iloc[0] / 2:.0f} h on 2 cores", flush=True)
    left = [u for u in units if not done(run, u, until)]
    print(f"done: {len(units) - len(left)} of {len(units)}; left: "
          + (", ".join(f"{u['model']}/seed{u['seed']}" for u in left) or "none"), flush=True)
    kept = unit_seconds(run, units, until)
    if kept and left:
        mean, hours = sum(kept) / len(kept), len(left) / 3600 / cores
        print(f"measured: {mean / 60:.0f} min per kept unit (mean of {len(kept)}; {min(kept) / 60:.0f} to "
              f"{max(kept) / 60:.0f}); the {len(left)} left: about {mean * hours:.1f} h on {cores} cores "
              f"({min(kept) * hours:.1f} to {max(kept) * hours:.1f} h at the shortest and the longest)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("run", type=Path)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--commit", action="store_true")
    ap.add_argument("--estimate", action="store_true")
    ap.add_argument("--keep-from", type=Path, metavar="CHECKOUT",
                    help="only keep the units a run in another checkout of this config has finished")
    ap.add_argument("--until", choices=RULES[:1], help="a unit is its trainings' scores alone; no aggregate")
    ap.add_argument("--park", action="store_true", help="keep the unfinished units' finished trainings in RUN")
    ap.add_argument("--hours", type=float, help="the sitting's length: units start until its end, and the "
                    "units still running then are parked")
    args = ap.parse_args()
    cfg = lwconfig.load(ROOT, args.config)
    rec = cfg["recovery"]
    opt = rec["optimizer"]
    units = [dict(optimizer=opt, model=m, seed=s) for s in rec["seeds"] for m in rec["models"] or cfg["models"]]
    run = args.run if args.run.is_absolute() else ROOT / args.run
    until = args.until
    estimate(cfg, units, run, until, args.cores)
    if args.estimate:
        return
    if not (run / "run.yaml").is_file():  # what the run holds, for the readers of a partial run (experiments/data_pages.py)
        run.mkdir(parents=True, exist_ok=True)
        (run / "run.yaml").write_text(yaml.safe_dump(dict(config=str(args.config), models=sorted({u["model"] for u in units}),
                                                          seeds=list(rec["seeds"]), **({"until": until} if until else {})),
                                                     sort_keys=False))
    if args.keep_from:
        for u in units:
            if not done(run, u, until) and all((args.keep_from / p).is_file()
                                               for p in paths(unit_tables(until), **u).values()):
                keep(args.keep_from, run, u, None, args.commit, until)
        return
    options = ["--configfile", str(args.config.resolve()), "--rerun-triggers", "mtime"]
    work = work_folder(run)
    if args.park:
        parked = [f"{u['model']}/seed{u['seed']}" for u in park(work, run, units, until, args.commit)]
        print(f"parked: {', '.join(parked) or 'none'}", flush=True)
        return
    restore(run, work, units, until)
    t0 = time.time()

    def on_end(u: dict) -> None:
        keep(work, run, u, round(time.time() - t0, 1), args.commit, until)
        print(f"{u['model']} seed {u['seed']}: kept after {time.time() - t0:.0f} s", flush=True)

    def on_stop(stopped: list) -> None:
        segments = {(u["model"], u["seed"]): (wall, cpu) for u, wall, cpu in stopped}
        parked = park(work, run, [u for u, _, _ in stopped], until, args.commit, segments)
        print(f"the sitting's {args.hours:g} h are over: stopped {len(stopped)}, parked "
              + (", ".join(f"{u['model']}/seed{u['seed']}" for u in parked) or "none (no training had finished)"),
              flush=True)

    left = run_units([u for u in units if not done(run, u, until)], work, options, args.cores, until, on_end,
                     None if args.hours is None else t0 + 3600 * args.hours, on_stop)
    if left:
        print(f"the sitting's {args.hours:g} h are over: {len(left)} not started; the same command goes on from "
              "the kept and the parked units", flush=True)
        return
    if not until and all(done(run, u) for u in units):
        subprocess.run([*SNAKEMAKE, "recovery", *options, "--cores", str(args.cores)], cwd=work, check=True)
        kept = [*(path.format(seed_set="exploration") for path in layout.BUDGET.values()),
                *(f"{layout.BENCH}/{rule}/exploration.tsv" for rule in AGGREGATE_RULES)]
        for rel in kept:
            copy(work / rel, layout.under(run, rel))
        if args.commit:
            commit_files(ROOT, [layout.under(run, rel) for rel in kept], f"{run.name}: the aggregate's tables")
        print(f"aggregate written; its tables are in {run}", file=sys.stderr)


if __name__ == "__main__":
    main()
