"""Which plain-rate optimizer and learning rate train in the default's budget? (docs/results.md)

Trains each (model, optimizer, lr) of the command line on the default config's task and model
(config/config.yaml: data seed 2, the default epochs and batch), one thread, and prints the
validation R^2 every 5 epochs and its best value. Claim (c) compares AdamW with a plain-rate
optimizer (Lambda = lr), so that optimizer must train comparably far. Run:

    python experiments/optimizer_probe.py --models diag,gru --runs sgd:0.2,sgd:0.5,sgd_momentum:0.2
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
import yaml

from learnwin.infra import layout
from learnwin.models import train
from learnwin.tasks.splits import write_splits

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="diag,gru")
    ap.add_argument("--runs", default="adamw:0.005,sgd:0.2,sgd:0.5,sgd_momentum:0.1,sgd_momentum:0.2")
    ap.add_argument("--seed", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    model_cfg = dict(cfg["model"])
    train_cfg = {k: cfg["train"][k] for k in ("epochs", "batch_size", "grad_clip", "r2_subset")}
    with tempfile.TemporaryDirectory() as tmp:
        data = layout.under(tmp, layout.DATA, seed=args.seed)
        write_splits(args.seed, cfg["task"], data)
        print("| model | optimizer | lr | val R² every 5 epochs | best val R² |\n|---|---|---|---|---|")
        for model in args.models.split(","):
            for run in args.runs.split(","):
                name, lr = run.split(":")
                hp = {**cfg["optim"].get(name, {}), "lr": float(lr)}
                curve = train.train_run(data_dir=data, out_dir=Path(tmp) / f"{model}-{run}",
                                        model=model, optimizer=name, seed=args.seed, model_config=model_cfg,
                                        optim_config=hp, train_config=train_cfg, snapshot_epochs=["best"])
                every = ", ".join(f"{r:.2f}" for r in curve["val_r2"].iloc[::5])
                print(f"| {model} | {name} | {lr} | {every} | {curve['val_r2'].max():.3f} |", flush=True)


if __name__ == "__main__":
    main()
