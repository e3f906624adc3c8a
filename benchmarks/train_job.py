"""CPU seconds of whole training jobs from two checkouts, run alternately (before and after a change).

Run: python benchmarks/train_job.py BEFORE_CHECKOUT AFTER_CHECKOUT [--config config/config.yaml]
     [--seed 2] [--rounds 2] [--models gru,lstm]

Each job is the train_model job of the config (one seed, every optimizer of the config), run
in a fresh process with 1 thread and the deterministic flag, as the workflow runs it, importing
learnwin from the named checkout. Jobs run one at a time, alternating between the checkouts, and
the minimum over rounds is printed: the benchmark TSVs of a `snakemake --cores 2` run hold two
concurrent jobs and Snakemake's sampled CPU time, which vary by a quarter between runs
(experiments/train_cpu.py reads those).
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

JOB = """
import sys, time
from pathlib import Path
import yaml
from learnwin.infra import runtime
runtime.set_torch_threads(1)
runtime.deterministic()
import torch
from learnwin.models.train import train_run
cfg = yaml.safe_load(open(sys.argv[1]))
data, out, model, opt = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5]
t0 = time.process_time()
train_run(data_dir=data, out_dir=out, model=model, optimizer=opt, seed=int(sys.argv[6]),
          model_config=cfg["model"], optim_config=cfg["optim"][opt], train_config=cfg["train"],
          snapshot_epochs=cfg["train"]["snapshot_epochs"], device=torch.device("cpu"))
print(time.process_time() - t0)
"""


def job(checkout: Path, config: Path, data: Path, out: Path, model: str, opt: str, seed: int) -> float:
    """CPU seconds of one training job (excluding interpreter start-up and imports)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    proc = subprocess.run([sys.executable, "-c", JOB, str(config), str(data), str(out), model, opt, str(seed)],
                          env=env, capture_output=True, text=True, check=True, cwd=checkout)
    return float(proc.stdout.split()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--config", type=Path, default=Path("config/config.yaml"))
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default=None, help="comma-separated (default: the config's)")
    args = ap.parse_args()
    config = args.config.resolve()
    cfg = yaml.safe_load(config.read_text())
    models = args.models.split(",") if args.models else cfg["models"]
    sys.path.insert(0, str(args.after))
    from learnwin.tasks.splits import write_splits

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        write_splits(args.seed, cfg["task"], data)
        best = {}
        for r in range(args.rounds):
            for model in models:
                for opt in cfg["optimizers"]:
                    for name, checkout in (("before", args.before), ("after", args.after)):
                        cpu = job(checkout.resolve(), config, data, Path(tmp) / f"{name}{r}{model}{opt}",
                                  model, opt, args.seed)
                        key = (model, opt, name)
                        best[key] = min(best.get(key, float("inf")), cpu)
    print(f"training job CPU s, seed {args.seed}, min over {args.rounds} rounds (1 thread, one job at a time)")
    print("| model | optimizer | before | after | after / before |")
    print("|---|---|---|---|---|")
    total = {"before": 0.0, "after": 0.0}
    for model in models:
        for opt in cfg["optimizers"]:
            b, a = best[(model, opt, "before")], best[(model, opt, "after")]
            total["before"] += b
            total["after"] += a
            print(f"| {model} | {opt} | {b:.2f} | {a:.2f} | {a / b:.3f} |")
    print(f"| all | | {total['before']:.2f} | {total['after']:.2f} | {total['after'] / total['before']:.3f} |")


if __name__ == "__main__":
    main()
