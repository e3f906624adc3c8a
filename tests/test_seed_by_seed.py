"""A budget-protocol run seed by seed (docs/method.md §10d, experiments/seed_by_seed.py): each
finished (model, seed)'s raw tables kept in the run's folder as it finishes, and a later sitting on
a fresh checkout (no results folder) restores them, trains only what is missing and gives the
aggregate of the uninterrupted run."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import yaml
from workflow_helpers import ROOT, copy_workflow, experiment_script

from learnwin.infra import config as lwconfig
from learnwin.infra import layout
from learnwin.infra.io import read_table

pytestmark = pytest.mark.slow

SEEDS = [2, 3]
UNIT = {"scores": layout.BUDGET_RUN, **layout.BUDGET_SNAPSHOT}


def _driver(work, *args, config="config/tiny.yaml", run="kept"):
    proc = subprocess.run([sys.executable, "experiments/seed_by_seed.py", config, run, *args],
                          cwd=work, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    work = copy_workflow(tmp_path_factory.mktemp("seeds") / "w")
    (work / "experiments").mkdir()
    shutil.copy2(ROOT / "experiments" / "seed_by_seed.py", work / "experiments")
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg["recovery"] = {**cfg.get("recovery", {}), "protocol": "budget", "models": ["const"], "seeds": SEEDS,
                       "budgets": [16, 32, 64, 128, 256], "lags": [1, 3, 5], "thresholds": [0.2], "frontier_stop": 1}
    (work / "config" / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    cfg["task"] = {**cfg["task"], "T": 16}  # another run with the same seeds: a shorter sequence
    (work / "config" / "short.yaml").write_text(yaml.safe_dump(cfg))
    return work


def _results(work, run):
    """The run's own results folder (seed_by_seed's work folder for it)."""
    return work / layout.ROOT / "seed_by_seed" / run / layout.ROOT


def _unit(seed):
    return {name: path.format(optimizer="adamw", model="const", seed=seed) for name, path in UNIT.items()}


def _learning_budget(results):
    return read_table(layout.under(results, layout.BUDGET["learning_budget"], seed_set="exploration"), "budget_tables")


def test_a_later_sitting_restores_the_kept_units_and_trains_only_the_rest(work):
    out = _driver(work, "--estimate")
    assert "done: 0 of 2" in out and not (work / "kept").exists()
    _driver(work)
    kept = work / "kept"
    for seed in SEEDS:
        assert all(layout.under(kept, rel).is_file() for rel in _unit(seed).values())
    sittings = yaml.safe_load((kept / "sittings.yaml").read_text())  # in the order the units finished
    assert sorted((s["model"], s["seed"]) for s in sittings) == [("const", 2), ("const", 3)]
    assert all(s["sitting_s"] > 0 for s in sittings)
    whole = _learning_budget(kept)
    assert whole.equals(_learning_budget(_results(work, "kept"))) and set(whole["seed"]) == set(SEEDS)
    assert all((kept / "benchmarks" / rule / "exploration.tsv").is_file() for rule in ("aggregate_budget", "plot_budget"))

    # a fresh checkout where the run stopped after seed 2: no results folder, seed 3 not kept
    shutil.rmtree(work / layout.ROOT)
    for rel in _unit(3).values():
        layout.under(kept, rel).unlink()
    out = _driver(work, "--hours", "0")  # a sitting over before a unit starts
    assert "h are over: 1 not started; the same command goes on" in out
    assert not (_results(work, "kept") / "benchmarks" / "train_budget").exists()  # nothing started
    assert len(yaml.safe_load((kept / "sittings.yaml").read_text())) == 2
    out = _driver(work)
    assert "done: 1 of 2" in out
    bench = _results(work, "kept") / "benchmarks" / "train_budget" / "adamw" / "const"
    assert sorted(p.name for p in bench.glob("*.tsv")) == ["seed3.tsv"]  # seed 2 restored, not trained
    sittings = yaml.safe_load((kept / "sittings.yaml").read_text())
    assert [(s["model"], s["seed"]) for s in sittings] == [("const", 2), ("const", 3), ("const", 3)]
    assert _learning_budget(kept).equals(whole)


def test_a_scores_only_run_of_another_config_trains_its_own_and_keeps_the_scores_alone(work):
    """``--until train_budget`` (a run read for its trainings' scores, as §10c's T 64 arm) on another
    config with the same seeds (a shorter T): it trains its own units in its own folder (the other
    run's outputs at the same paths do not pass for its), keeps each unit's scores and training
    benchmark alone, says so in its record, and runs no aggregate."""
    _driver(work, config="config/tiny.yaml", run="kept")  # the other run, done (or restored) first
    _driver(work, "--until", "train_budget", config="config/short.yaml", run="scores")
    scores = work / "scores"
    assert yaml.safe_load((scores / "run.yaml").read_text())["until"] == "train_budget"
    for seed in SEEDS:
        unit = _unit(seed)
        mine = read_table(layout.under(scores, unit["scores"]), "budget")
        assert mine.equals(read_table(layout.under(_results(work, "scores"), unit["scores"]), "budget"))
        assert not mine.equals(read_table(layout.under(work / "kept", unit["scores"]), "budget"))  # trained anew
        assert not any(layout.under(scores, unit[name]).exists() for name in layout.BUDGET_SNAPSHOT)
        assert (scores / "benchmarks" / "train_budget" / "adamw" / "const" / f"seed{seed}.tsv").is_file()
    assert not (scores / "benchmarks" / "snapshot_budget").exists()
    assert not (scores / "recovery" / "budget" / "exploration").exists()


def test_units_run_in_order_n_at_a_time_and_a_failure_keeps_the_running_ones(tmp_path, monkeypatch):
    """run_units with a stand-in for Snakemake (each call logs its start and end, the one of seed 3
    fails): units start in order, at most two at once, each kept as it ends; the failure starts no
    further unit and raises once the running one has ended and been kept."""
    sbs = experiment_script("seed_by_seed")
    call = ("import sys, time; seed = sys.argv[1].split('seed')[-1].split('/')[0]; log = open('log', 'a'); "
            "log.write(f'start {seed}\\n'); log.flush(); time.sleep({'2': 2.0, '3': 0.0}.get(seed, 0.2)); "
            "log.write(f'end {seed}\\n'); sys.exit(seed == '3')")
    monkeypatch.setattr(sbs, "SNAKEMAKE", [sys.executable, "-c", call])
    monkeypatch.setattr(sbs, "POLL_S", 0.05)
    launched, popen = [], subprocess.Popen  # the launch order is the driver's; the log's order of two
    # calls started together is the operating system's, so the order is read from the launches

    def launch(args, **kw):
        launched.append(int(args[3].split("seed")[-1].split("/")[0]))
        return popen(args, **kw)
    monkeypatch.setattr(sbs.subprocess, "Popen", launch)
    units = [dict(optimizer="adamw", model="const", seed=s) for s in (1, 2, 3, 4, 5)]
    kept = []
    with pytest.raises(subprocess.CalledProcessError):
        sbs.run_units(units, tmp_path, [], 2, None, lambda u: kept.append(u["seed"]))
    log = (tmp_path / "log").read_text().split()
    assert launched == [1, 2, 3]  # in order; 4 and 5 never start after 3 fails
    assert sorted(int(s) for word, s in zip(log[::2], log[1::2]) if word == "start") == launched
    assert kept == [1, 2]  # 2 ended after 3 failed, and was kept
    running = max(sum(1 if w == "start" else -1 for w in log[:i + 1:2]) for i in range(0, len(log), 2))
    assert running == 2


def _plant(sbs, run, unit, seconds, tables=True):
    """A unit in RUN: its tables (when ``tables``) and its rules' benchmark TSVs of ``seconds``."""
    planted = zip(sbs.paths(sbs.unit_bench(), **unit).values(), seconds)
    for rel, text in [*((rel, "x") for rel in sbs.paths(sbs.unit_tables(), **unit).values() if tables),
                      *((rel, f"s\th:m:s\n{s}\t0:00:00\n") for rel, s in planted)]:
        layout.under(run, rel).parent.mkdir(parents=True, exist_ok=True)
        layout.under(run, rel).write_text(text)


def test_the_time_left_is_read_from_the_kept_units_benchmarks(tmp_path):
    """unit_seconds: a kept unit's rules' benchmark seconds summed (120 + 30, 300 + 50); a unit with
    tables but no benchmark, or a benchmark but no tables, is left out."""
    sbs = experiment_script("seed_by_seed")
    units = [dict(optimizer="adamw", model="diag", seed=s) for s in (1, 2, 3, 4)]
    for u, secs, tables in zip(units, [(120, 30), (300, 50), (), (999, 999)], [True, True, True, False]):
        _plant(sbs, tmp_path, u, secs, tables)
    assert sbs.unit_seconds(tmp_path, units) == [150.0, 350.0]
    assert sbs.unit_seconds(tmp_path, units, "train_budget") == [120.0, 300.0]


def test_the_estimate_gives_the_time_left_at_the_kept_units_mean_shortest_and_longest(tmp_path, capsys):
    """--estimate: two kept units of 1 h and 3 h (benchmark TSVs), four left on 2 cores: 4 x 2 h / 2 =
    4.0 h at the mean, 2.0 to 6.0 h at the shortest and the longest."""
    sbs = experiment_script("seed_by_seed")
    units = [dict(optimizer="adamw", model="diag", seed=s) for s in range(1, 7)]
    for u, secs in zip(units, [(3000, 600), (10000, 800)]):
        _plant(sbs, tmp_path, u, secs)
    cfg = lwconfig.load(ROOT, ROOT / "config" / "recovery-growth-T512-diag.yaml")
    sbs.estimate(cfg, units, tmp_path, None, 2)
    out = capsys.readouterr().out
    assert "done: 2 of 6; left: diag/seed3, diag/seed4, diag/seed5, diag/seed6" in out
    assert ("measured: 120 min per kept unit (mean of 2; 60 to 180); the 4 left: about 4.0 h on 2 cores "
            "(2.0 to 6.0 h at the shortest and the longest)") in out


def test_a_parked_units_trainings_go_to_the_run_and_back_and_leave_it_when_kept(tmp_path):
    """--park copies an unfinished unit's resume state (not a kept unit's) into RUN, with a sittings
    entry of its trainings; the next sitting's restore puts it into a fresh work folder (not over a
    state the work folder has); keeping the unit removes it from RUN."""
    sbs = experiment_script("seed_by_seed")
    run, work = tmp_path / "run", tmp_path / "work"
    units = [dict(optimizer="adamw", model="diag", seed=s) for s in (1, 2)]
    for u in units:
        state = work / sbs.resume_state(u)
        state.parent.mkdir(parents=True)
        state.write_text('{"fingerprint": "f", "units": {"control": [1], "lag=4": [2], "lag=8": [3]}}')
    for rel in sbs.paths(sbs.unit_tables(), **units[1]).values():  # seed 2 is kept
        layout.under(run, rel).parent.mkdir(parents=True, exist_ok=True)
        layout.under(run, rel).write_text("table")
    assert sbs.park(work, run, units, None, False) == [units[0]]
    parked = layout.under(run, sbs.resume_state(units[0]))
    assert parked.read_text() == (work / sbs.resume_state(units[0])).read_text()
    assert not layout.under(run, sbs.resume_state(units[1])).exists()
    entry, = yaml.safe_load((run / "sittings.yaml").read_text())
    assert (entry["seed"], entry["parked_trainings"]) == (1, 3) and entry["cpu"]

    fresh = tmp_path / "fresh"
    sbs.restore(run, fresh, units, None)
    assert (fresh / sbs.resume_state(units[0])).read_text() == parked.read_text()
    assert all((fresh / rel).read_text() == "table" for rel in sbs.paths(sbs.unit_tables(), **units[1]).values())
    (fresh / sbs.resume_state(units[0])).write_text("newer")
    sbs.restore(run, fresh, units, None)
    assert (fresh / sbs.resume_state(units[0])).read_text() == "newer"  # the work folder's own state stays

    for rel in sbs.paths(sbs.unit_tables(), **units[0]).values():  # seed 1 finishes
        (fresh / rel).write_text("table")
    sbs.keep(fresh, run, units[0], 10.0, False, None)
    assert not parked.exists() and sbs.done(run, units[0])
    assert [e.get("parked_trainings") for e in yaml.safe_load((run / "sittings.yaml").read_text())] == [3, None]


def test_a_unit_still_running_at_the_deadline_is_stopped_with_its_seconds_and_its_jobs_cpu(tmp_path, monkeypatch):
    """run_units with ``deadline``: the running calls are stopped when it passes and ``on_stop`` gets
    each one's wall and CPU seconds. The stand-in call is Snakemake's shape: a parent that outlives
    SIGTERM and waits for its job, a child that burns 0.3 CPU s, writes its pid and sleeps; the job's
    CPU counts (the parent's own is about 0.05 s) and it leaves no process behind. Units not started
    are returned; a stopped unit is not kept, and a deadline already past starts nothing."""
    sbs = experiment_script("seed_by_seed")
    job = ("import os, sys, time\nwhile time.process_time() < 0.3: pass\n"
           "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)")
    parent = ("import signal, subprocess, sys; signal.signal(signal.SIGTERM, lambda *a: None); "
              f"subprocess.run([sys.executable, '-c', {job!r}, 'job' + sys.argv[1].split('seed')[-1].split('/')[0]])")
    monkeypatch.setattr(sbs, "SNAKEMAKE", [sys.executable, "-c", parent])
    monkeypatch.setattr(sbs, "POLL_S", 0.05)
    units = [dict(optimizer="adamw", model="const", seed=s) for s in (1, 2, 3)]
    kept, stopped = [], []
    t0 = time.time()
    left = sbs.run_units(units, tmp_path, [], 2, None, lambda u: kept.append(u), t0 + 3.0,
                         on_stop=stopped.extend)
    assert [u["seed"] for u in left] == [3] and kept == []
    assert [u["seed"] for u, _, _ in stopped] == [1, 2]
    for u, wall, cpu in stopped:
        assert 2.9 <= wall <= time.time() - t0 + 0.1 and 0.3 <= cpu <= 1.0  # seconds to 0.1
        with pytest.raises(ProcessLookupError):  # the job is gone
            os.kill(int((tmp_path / f"job{u['seed']}").read_text()), 0)
    assert sbs.run_units(units, tmp_path, [], 2, None, kept.append, time.time(), stopped.extend) == units
    assert kept == [] and len(stopped) == 2


def test_a_unit_parked_by_the_driver_has_its_segments_seconds(tmp_path):
    """park with ``segments``: the parked unit's sittings entry gives its trainings and its segment's
    wall and CPU seconds; one parked from outside (no segment) gives its trainings alone."""
    sbs = experiment_script("seed_by_seed")
    work, run = tmp_path / "work", tmp_path / "run"
    units = [dict(optimizer="adamw", model="diag", seed=s) for s in (1, 2)]
    for u in units:
        (work / sbs.resume_state(u)).parent.mkdir(parents=True)
        (work / sbs.resume_state(u)).write_text(json.dumps({"fingerprint": "f", "units": {"a": 1, "b": 2}}))
    run.mkdir()
    assert sbs.park(work, run, units, None, False, {("diag", 1): (3600.5, 3500.25)}) == units
    first, second = yaml.safe_load((run / "sittings.yaml").read_text())
    assert (first["parked_trainings"], first["parked_wall_s"], first["parked_cpu_s"]) == (2, 3600.5, 3500.25)
    assert second["parked_trainings"] == 2 and "parked_wall_s" not in second
