"""Scale-out tests: the SLURM workflow profile, on the paper DAG and on a real local cluster.

* ``test_paper_dag_resources`` (fast, no cluster): a dry run of the paper config through
  ``profiles/slurm`` has exactly the jobs the config implies, and the profile gives the
  training and snapshot jobs one GPU each.
* ``test_smoke_dag_through_slurm`` (slow, needs root + apt): brings up a one-node SLURM
  cluster with ``tests/slurm/cluster.sh``, runs the smoke DAG through ``sbatch`` with the
  real profile, and checks that every Parquet artifact equals the one of a local run.

Environment knobs:
  LEARNWIN_REQUIRE_SLURM=1         fail instead of skip when no SLURM cluster can be brought up
                                   (set it in CI, so a broken set-up cannot pass as a skip)
  LEARNWIN_SLURM_STATE_DIR=DIR     use (and leave running) the cluster of `cluster.sh up DIR`
  LEARNWIN_SLURM_TIMEOUT=SECONDS   limit of the SLURM Snakemake run (default 1800)
  LEARNWIN_SLURM_FULL_SMOKE=1      run the whole smoke DAG through SLURM, not SMOKE_SLICE

Every SLURM job costs a few seconds of scheduling plus a fresh Python + Snakemake start, and
the test node has 2 CPUs, so the full smoke DAG (~200 jobs) takes half an hour there. By
default both runs (local and SLURM) therefore use the smoke config narrowed by SMOKE_SLICE:
every rule still runs, through sbatch where it is not a local rule.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_helpers import ROOT, copy_workflow

REPO = ROOT
CLUSTER_SH = REPO / "tests" / "slurm" / "cluster.sh"
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
# Columns that measure wall time, so legitimately differ between two runs of the same DAG.
TIMING_COLUMNS = {"seconds"}
# Narrowing of config/smoke.yaml for the SLURM test (applied to both runs, see the docstring).
SMOKE_SLICE = {"models": ["gru"], "optimizers": ["adamw"]}
# Rules that must never reach SLURM (the workflow declares them `localrules`).
LOCAL_RULE_PATTERN = re.compile(
    r"^(plot_\w+|aggregate_stats|fit_decay|write_summary|write_provenance|check_training)$")


def _has_slurm_plugin() -> bool:
    return importlib.util.find_spec("snakemake_executor_plugin_slurm") is not None


def _require_plugin() -> None:
    if not _has_slurm_plugin():
        pytest.skip(
            "snakemake-executor-plugin-slurm is not installed "
            "(pip install 'snakemake-executor-plugin-slurm==2.8.0' or pip install -e '.[slurm]')"
        )


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("LEARNWIN_REQUIRE_SLURM") == "1":
        pytest.fail(f"LEARNWIN_REQUIRE_SLURM=1 but {reason}")
    pytest.skip(reason)


def _say(capsys, text: str) -> None:
    """Write straight to the terminal (not captured), so CI logs show it even on success."""
    with capsys.disabled():
        sys.stderr.write(text if text.endswith("\n") else text + "\n")


def _merged_config(*files: str | dict) -> dict:
    """config/config.yaml overlaid (recursively, as Snakemake does) with ``files`` (paths
    relative to the repository, or dicts)."""

    def update(base: dict, new: dict) -> dict:
        for key, value in new.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                update(base[key], value)
            else:
                base[key] = value
        return base

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for name in files:
        update(config, name if isinstance(name, dict) else yaml.safe_load((REPO / name).read_text()))
    return config


def _run(cmd: list[str], cwd: Path, timeout: int, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout
    )


# ---- dry-run parsing ---------------------------------------------------------------------

_JOB_HEADER = re.compile(r"^(local)?rule (\w+):$")
_RESOURCE = re.compile(r"(\w+)=([^,]*)")


def parse_dry_run(text: str) -> tuple[Counter, dict[str, list[dict]], Counter]:
    """Parse ``snakemake -n`` output.

    Returns the job counts per rule from the job blocks, the resources of every job per rule
    (one dict per job, values as strings, its wildcards as ``wildcard_<name>``) and the "Job
    stats" table.
    """
    counts: Counter = Counter()
    resources: dict[str, list[dict]] = defaultdict(list)
    current = None
    for line in text.splitlines():
        header = _JOB_HEADER.match(line.strip()) if not line.startswith(" ") else None
        if header:
            current = header.group(2)
            counts[current] += 1
            resources[current].append({})
        elif current and line.strip().startswith(("resources:", "wildcards:")):
            key, _, body = line.strip().partition(":")
            found = {k: v.strip() for k, v in _RESOURCE.findall(body)}
            resources[current][-1].update(found if key == "resources" else {f"wildcard_{k}": v for k, v in found.items()})
        elif not line.strip():
            current = None
    stats: Counter = Counter()
    if "Job stats:" in text:
        table = text.split("Job stats:", 1)[1].splitlines()
        for line in table[3:]:  # skip the header and dashes
            parts = line.split()
            if len(parts) != 2 or parts[0] == "total":
                break
            stats[parts[0]] = int(parts[1])
    return counts, resources, stats


def expected_job_counts(config: dict) -> dict[str, int]:
    """Jobs per rule implied by a config (wildcards of each rule, see docs/artifacts.md)."""
    seeds, models, optimizers = len(config["seeds"]), len(config["models"]), len(config["optimizers"])
    epochs = len(config["train"]["snapshot_epochs"])
    runs = seeds * models * optimizers
    return {
        "make_data": seeds,  # one per data/seed{S}
        "train_model": runs,  # one per train/{optimizer}/{model}/seed{S}
        "check_training": runs,  # .../seed{S}/converged.txt
        "take_snapshot": runs * epochs,  # .../seed{S}/epoch{E}
        "fit_alpha": runs * epochs,
        "compute_window": runs * epochs,
        "fit_decay": optimizers * models * epochs,  # decay/{optimizer}/{model}/epoch{E}
        "aggregate_stats": 1,  # stats/*
        "write_summary": 1,
        "write_provenance": 1,
    }


#: A GPU node as the project has met one: one H200 (139 GiB usable) and 128 GiB of host memory; and the
#: usual 24 h limit of a cluster's GPU partition.
GPU_NODE = {"mem_mb": 128 * 1024, "gpu_mem_mb": 139 * 1024, "runtime": 24 * 60}
#: The rules whose jobs run CUDA code: profiles/slurm asks one GPU for each.
GPU_RULES = ("train_model", "train_ensemble", "take_snapshot", "train_recovery", "snapshot_recovery",
             "train_budget", "snapshot_budget")


def _paper_dry_run(tmp_path, *extra: str, targets: tuple[str, ...] = ()) -> tuple[Counter, dict[str, list[dict]],
                                                                                Counter]:
    """``snakemake -n <targets> --workflow-profile profiles/slurm --configfile config/paper.yaml <extra>``, parsed."""
    work = copy_workflow(tmp_path / "paper")
    proc = _run(SNAKEMAKE + ["-n", *targets, "--workflow-profile", "profiles/slurm", "--configfile", "config/paper.yaml",
                             *extra], cwd=work, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "Using workflow specific profile profiles/slurm" in proc.stdout
    return parse_dry_run(proc.stdout)


def _paper_config() -> dict:
    from snakemake.utils import validate

    config = _merged_config("config/paper.yaml")
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    return config


def _fits_a_gpu_node(resources: dict[str, list[dict]]) -> None:
    """Every job asks at most a GPU node (:data:`GPU_NODE`): its runtime, host and device memory."""
    for rule, jobs in resources.items():
        for job in jobs:
            for key, limit in GPU_NODE.items():
                assert int(job.get(key, 0)) <= limit, f"{rule} {job}: {key} past a GPU node's {limit}"


def test_paper_requests_fit_a_gpu_node(tmp_path):
    """The paper DAG through profiles/slurm asks of each job what the GPU cost table gives it (a GPU
    job is sized for the GPU) and at most a GPU node: below 24 h, its host and its device memory;
    so does its ensemble twin (``--config ensemble=true``, as a user types it)."""
    _require_plugin()
    from learnwin.infra import resources as res

    config = _paper_config()
    for extra, rule, runtime, mem in (((), "train_model", res.train_runtime_min, res.train_gpu_mem_mb),
                                      (("--config", "ensemble=true"), "train_ensemble", res.ensemble_runtime_min,
                                       res.ensemble_gpu_mem_mb)):
        _, resources, _ = _paper_dry_run(tmp_path / rule, *extra)
        _fits_a_gpu_node(resources)
        for name, request, device in ((rule, runtime, mem), ("take_snapshot", res.snapshot_runtime_min,
                                                             res.snapshot_gpu_mem_mb)):
            assert resources[name], f"no {name} job"
            for job in resources[name]:
                model = job["wildcard_model"]
                assert int(job["runtime"]) == request(config, model, True) < request(config, model, False), job
                assert int(job["gpu_mem_mb"]) == device(config, model) and job["gpu"] == "1", job


def test_paper_requests_on_cpu_nodes_are_capped_and_resumed(tmp_path):
    """On a cluster without GPUs (the profile's GPUs taken away) the paper's trainings need up to days
    by the CPU cost law: each asks the cap, below 24 h, and declares the retries its resumed attempts need."""
    _require_plugin()
    from learnwin.infra import resources as res

    _, resources, _ = _paper_dry_run(tmp_path, "--set-resources", "train_model:gpu=0", "take_snapshot:gpu=0")
    config = _paper_config()
    _fits_a_gpu_node(resources)
    assert {int(job["runtime"]) for job in resources["train_model"]} == {res.MAX_RUNTIME}
    longest = max(res.train_runtime_min(config, m, False, cap=False) for m in config["models"])
    assert longest > 3 * GPU_NODE["runtime"] and res.resume_retries(longest) == -(-longest // res.MAX_RUNTIME)


@pytest.mark.parametrize("protocol", ["budget", "dataset", "budget, ensemble"])
def test_paper_recovery_jobs_are_capped_and_resumed(tmp_path, protocol):
    """The recovery jobs of the paper config through profiles/slurm, targets ``recovery`` (the budget
    protocol, paper.yaml's; or the dataset protocol, ``--config recovery={protocol: dataset}``) and
    ``recovery_confirm`` (the budget protocol on the confirm seeds): each train_budget and
    train_recovery job needs 1.5-10 days on a GPU by the GPU cost table, asks the cap (below 24 h)
    on a GPU, and its rule retries as often as its longest job needs (each attempt resumes from its
    ``.resume/`` state); every job fits a GPU node as asked, host memory included: a budget job holds
    the seed's stream of N_max = 2^20 sequences (T 1024, D 16) in float32 on the host, 91 GiB as asked
    on a GPU (learnwin.infra.resources.budget_mem_mb); under ``--config ensemble=true`` its lags train
    in chunks that fit the device (learnwin.infra.resources.lag_ensemble)."""
    _require_plugin()
    from learnwin.infra import resources as res

    extra = {"budget": (), "dataset": ("--config", "recovery={protocol: dataset}"),
             "budget, ensemble": ("--config", "ensemble=true")}[protocol]
    _, resources, _ = _paper_dry_run(tmp_path, *extra, targets=("recovery", "recovery_confirm"))
    config = _paper_config()
    _fits_a_gpu_node(resources)
    requests = {"train_budget": lambda m, job, cap: res.budget_runtime_min(config, m, True, cap)}
    if protocol == "dataset":
        requests["train_recovery"] = lambda m, job, cap: res.recovery_runtime_min(config, m, job["wildcard_arm"], True,
                                                                                  cap)
    assert {rule for rule in ("train_budget", "train_recovery") if resources[rule]} == set(requests)
    for rule, request in requests.items():
        for job in resources[rule]:
            model = job["wildcard_model"]
            assert job["gpu"] == "1" and int(job["runtime"]) == request(model, job, True) == res.MAX_RUNTIME, job
        longest = max(request(job["wildcard_model"], job, False) for job in resources[rule])
        assert longest > 1.5 * GPU_NODE["runtime"] and res.resume_retries(longest) >= 2, (rule, longest)


def test_paper_dag_resources(tmp_path):
    """The paper DAG through profiles/slurm: job counts from the config, GPUs where asked."""
    _require_plugin()
    work = copy_workflow(tmp_path / "paper")
    proc = _run(
        SNAKEMAKE + ["-n", "--workflow-profile", "profiles/slurm", "--configfile", "config/paper.yaml"],
        cwd=work,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "Using workflow specific profile profiles/slurm" in proc.stdout
    counts, resources, stats = parse_dry_run(proc.stdout)

    # The job blocks and Snakemake's own "Job stats" table agree.
    assert counts == stats, f"job blocks {dict(counts)} != Job stats {dict(stats)}"
    config = _merged_config("config/paper.yaml")
    for rule, n in expected_job_counts(config).items():
        assert counts[rule] == n, f"{rule}: {counts[rule]} jobs in the DAG, the config implies {n}"
    assert any(rule.startswith("plot_") for rule in counts), f"no plot_* rule in {sorted(counts)}"

    # The profile's set-resources: one GPU per training and snapshot job, none elsewhere.
    for rule in ("train_model", "take_snapshot"):
        gpus = Counter(job.get("gpu") for job in resources[rule])
        assert gpus == {"1": counts[rule]}, f"{rule} gpu values: {dict(gpus)}"
    for rule, jobs in resources.items():
        if rule not in GPU_RULES:
            assert all(job.get("gpu", "0") == "0" for job in jobs), f"{rule} asks for a GPU"
    # Every SLURM-bound job carries a memory and time request (sbatch --mem / -t).
    for rule in ("make_data", "train_model", "take_snapshot", "fit_alpha", "compute_window"):
        for job in resources[rule]:
            assert int(job["mem_mb"]) > 0 and int(job["runtime"]) > 0, f"{rule}: {job}"
    assert all(job.get("train_slot") == "1" for job in resources["train_model"])



def test_ensemble_jobs_ask_for_a_gpu(tmp_path):
    """With `ensemble: true` (GPU nodes) a model's runs train in one train_ensemble job, and the
    profile asks one GPU for each, as for train_model."""
    _require_plugin()
    work = copy_workflow(tmp_path / "ensemble")
    proc = _run(SNAKEMAKE + ["-n", "--workflow-profile", "profiles/slurm", "--configfile", "config/smoke.yaml",
                             "--config", "ensemble=True"], cwd=work, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:]
    counts, resources, _ = parse_dry_run(proc.stdout)
    assert counts["train_ensemble"] == len(_merged_config("config/smoke.yaml")["models"]) and not counts["train_model"]
    assert Counter(job.get("gpu") for job in resources["train_ensemble"]) == {"1": counts["train_ensemble"]}


# ---- the real cluster --------------------------------------------------------------------


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running one-node SLURM cluster (cluster.sh up); stopped again at the end."""
    if not _has_slurm_plugin():
        _skip_or_fail("snakemake-executor-plugin-slurm is not installed")
    if os.geteuid() != 0:
        _skip_or_fail("tests/slurm/cluster.sh needs root (apt install, munge, slurm daemons)")
    if shutil.which("apt-get") is None and shutil.which("sbatch") is None:
        _skip_or_fail("neither SLURM nor apt-get is available to install it")
    given = os.environ.get("LEARNWIN_SLURM_STATE_DIR")
    state = Path(given) if given else tmp_path_factory.mktemp("slurm-state")
    proc = _run(["bash", str(CLUSTER_SH), "up", str(state)], cwd=REPO, timeout=900)
    if proc.returncode == 3:  # no root / no apt / install failed: the environment, not our code
        _skip_or_fail(f"cannot install SLURM here (cluster.sh up exit 3): {proc.stdout[-2000:]}")
    if proc.returncode != 0:
        pytest.fail(f"cluster.sh up failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}")
    yield state
    if not given:
        down = _run(["bash", str(CLUSTER_SH), "down", str(state)], cwd=REPO, timeout=120)
        assert down.returncode == 0, down.stdout


def _node_cpus() -> int:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%c"], text=True, capture_output=True, check=True)
    return int(out.stdout.split()[0])


def _slurm_jobs(run_id: str) -> dict[str, tuple[str, str]]:
    """SLURM job id -> (state, comment) of every job Snakemake submitted in run ``run_id``
    (the plugin names each job after its run id). Finished jobs stay listed for MinJobAge."""
    out = subprocess.run(
        ["squeue", "--states=all", "-h", "--name", run_id, "-o", "%i|%T|%k"],
        text=True,
        capture_output=True,
        check=True,
    )
    jobs = {}
    for line in out.stdout.splitlines():
        job_id, state, comment = line.strip().split("|", 2)
        jobs[job_id] = (state, comment)
    return jobs


def _parquet_files(results: Path) -> dict[str, Path]:
    return {str(p.relative_to(results)): p for p in sorted(results.rglob("*.parquet"))}


@pytest.mark.slow
@pytest.mark.slurm
def test_smoke_dag_through_slurm(slurm_cluster, tmp_path, capsys):
    """The smoke DAG through sbatch gives the same Parquet artifacts as a local run."""
    full = os.environ.get("LEARNWIN_SLURM_FULL_SMOKE") == "1"
    narrowing = {} if full else SMOKE_SLICE
    smoke = ["--configfile", "config/smoke.yaml", "slice.yaml"]
    cpus = _node_cpus()

    local = copy_workflow(tmp_path / "local")
    remote = copy_workflow(tmp_path / "slurm")
    for work in (local, remote):
        (work / "slice.yaml").write_text(yaml.safe_dump(narrowing))
    proc = _run(SNAKEMAKE + ["--cores", str(cpus)] + smoke, cwd=local, timeout=1800)
    assert proc.returncode == 0, f"local smoke run failed:\n{proc.stdout[-6000:]}"

    limit = int(os.environ.get("LEARNWIN_SLURM_TIMEOUT", "1800"))
    cmd = (
        # The plugin can wait forever on a broken status query and ignores SIGTERM while it
        # does (it waits for running jobs), hence timeout -k: SIGKILL 15 s after SIGTERM.
        ["timeout", "-k", "15", str(limit)]
        + SNAKEMAKE
        + ["--workflow-profile", "profiles/slurm"]
        + smoke
        + [
            # No slurmdbd on the test cluster: sacct fails, squeue works (MinJobAge=600).
            "--slurm-status-command", "squeue",
            # Poll after 2 s instead of 40 s (the plugin backs off on its own).
            "--slurm-init-seconds-before-status-checks", "2",
            # The test node has no GPU: undo the profile's gpu=1 (this replaces the whole
            # set-resources key of the profile).
            "--set-resources", "train_model:gpu=0", "take_snapshot:gpu=0",
            # Same thread counts as the local run (--cores caps threads there); a job asking
            # for more CPUs than the node has would never be scheduled.
            "--max-threads", str(cpus),
            "--jobs", "2",
        ]
    )
    proc = _run(cmd, cwd=remote, timeout=limit + 60)
    log = proc.stdout
    (tmp_path / "slurm-run.log").write_text(log)
    assert proc.returncode != 124, f"SLURM run hit the {limit} s limit:\n{log[-6000:]}"
    assert proc.returncode == 0, f"SLURM smoke run failed (exit {proc.returncode}):\n{log[-6000:]}"

    # ---- the jobs really went through SLURM ----
    submitted = dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", log))
    run_id = re.search(r"SLURM run ID: ([0-9a-f-]+)", log).group(1)
    jobs = _slurm_jobs(run_id)
    _say(
        capsys,
        f"\n[test_slurm] SLURM run {run_id}: {len(jobs)} jobs submitted through sbatch\n"
        + "\n".join(f"[test_slurm]   slurm job {jid:>5}  {state:<10} {comment}" for jid, (state, comment) in sorted(jobs.items(), key=lambda kv: int(kv[0]))),
    )
    assert sorted(submitted.values(), key=int) == sorted(jobs, key=int), "log and squeue disagree on job ids"
    not_done = {jid: st for jid, (st, _) in jobs.items() if st != "COMPLETED"}
    assert not not_done, f"SLURM jobs not COMPLETED: {not_done}"
    remote_rules = Counter(re.sub(r"^rule_|_wildcards_.*$", "", c) for _, c in jobs.values())
    # One sbatch per non-local job (no retries were needed), none for localrules.
    non_local_jobs = len(re.findall(r"^rule \w+:$", log, flags=re.M))
    assert len(jobs) == non_local_jobs, f"{len(jobs)} SLURM jobs for {non_local_jobs} non-local jobs"
    leaked = [rule for rule in remote_rules if LOCAL_RULE_PATTERN.match(rule)]
    assert not leaked, f"local rules were submitted to SLURM: {leaked}"
    config = _merged_config("config/smoke.yaml", narrowing)
    expected = expected_job_counts(config)
    for rule in ("make_data", "train_model", "take_snapshot", "fit_alpha", "compute_window"):
        assert remote_rules[rule] == expected[rule], f"{rule}: {remote_rules[rule]} SLURM jobs, expected {expected[rule]}"

    # ---- same artifacts, same contents ----
    local_files = _parquet_files(local / "results")
    remote_files = _parquet_files(remote / "results")
    assert local_files, "the local run wrote no Parquet files"
    assert sorted(local_files) == sorted(remote_files)
    for name, path in local_files.items():
        left = pd.read_parquet(path)
        right = pd.read_parquet(remote_files[name])
        drop = sorted(TIMING_COLUMNS & set(left.columns))
        pd.testing.assert_frame_equal(
            left.drop(columns=drop), right.drop(columns=drop), check_exact=True, obj=name
        )
    _say(capsys, f"[test_slurm] {len(local_files)} Parquet artifacts identical between local and SLURM runs")


def test_gpu_profile_shares_one_device(tmp_path):
    """profiles/gpu: every job that may run CUDA code declares its device memory (gpu_mem_mb, from
    learnwin.infra.resources), and the profile limits their sum to one device, so that a GPU runs
    only as many of the paper's jobs at once as fit (two LSTM trainings on an H100, each with its
    evaluation graphs)."""
    from learnwin.infra import resources as res

    profile = yaml.safe_load((REPO / "profiles" / "gpu" / "config.yaml").read_text())
    limit = profile["resources"]["gpu_mem_mb"]
    assert limit <= 80 * 1000
    work = copy_workflow(tmp_path / "gpu")
    proc = _run(SNAKEMAKE + ["-n", "--workflow-profile", "profiles/gpu", "--configfile", "config/paper.yaml"],
                cwd=work, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:]
    _, resources, _ = parse_dry_run(proc.stdout)
    config = _paper_config()
    for rule in ("train_model", "take_snapshot"):
        assert resources[rule] and all(int(job["gpu_mem_mb"]) > 1000 for job in resources[rule]), rule
    lstm = {int(job["gpu_mem_mb"]) for job in resources["train_model"] if job["wildcard_model"] == "lstm"}
    assert lstm == {res.train_gpu_mem_mb(config, "lstm")} and limit // lstm.pop() == 2
