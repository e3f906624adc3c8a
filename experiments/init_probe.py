"""Gate init at the default size: time scale at init and best val R^2 of each gate_init (docs/method.md §2).

For each (model, gate_init) of the command line, on the default config's task and model
(config/config.yaml, its gate_init replaced; data and run seed ``--seed``, AdamW with the
default's hyper-parameters, the default epochs and batch, one thread): the mean leak at init
(1 - s, 1 - z or f, averaged over the first 256 diag sequences and every step), the time scale
it implies, tau_init = -1 / log(mean leak), and the best validation R^2 of the trained run. Run:

    python experiments/init_probe.py --models gru,lstm,diag --inits paper,official --seed 7
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import numpy as np
import torch
import yaml

from learnwin.infra import io
from learnwin.models import train
from learnwin.models.cells import build_model
from learnwin.tasks.splits import write_splits

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gru,lstm,diag")
    ap.add_argument("--inits", default="paper,official")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-train", action="store_true", help="only the time scale at init")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    train_cfg = {k: cfg["train"][k] for k in ("epochs", "batch_size", "grad_clip", "r2_subset")}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "splits"
        write_splits(args.seed, cfg["task"], data)
        x = torch.from_numpy(np.array(io.load_split(data, "diag")[0][:256]))
        print("| model | gate_init | mean leak at init | tau_init (steps) | best val R² |\n|---|---|---|---|---|")
        for model in args.models.split(","):
            for init in args.inits.split(","):
                model_cfg = {**cfg["model"], "gate_init": init}
                torch.manual_seed(args.seed)  # the init train_run draws
                net = build_model(model, cfg["task"]["D"], **model_cfg)
                leak = float(net.cell.trace(x).leak.double().mean())
                tau = -1.0 / math.log(leak)
                best = "–"
                if not args.no_train:
                    curve = train.train_run(data_dir=data, out_dir=Path(tmp) / f"{model}-{init}", model=model,
                                            optimizer="adamw", seed=args.seed, model_config=model_cfg,
                                            optim_config=cfg["optim"]["adamw"], train_config=train_cfg,
                                            snapshot_epochs=["best"])
                    best = f"{curve['val_r2'].max():.3f}"
                print(f"| {model} | {init} | {leak:.3f} | {tau:.2f} | {best} |", flush=True)


if __name__ == "__main__":
    main()
