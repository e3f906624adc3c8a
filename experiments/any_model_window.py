"""The measured window of models outside learnwin's registry (docs/results-any-model.md): torch's
``nn.LSTM`` beside learnwin's LSTM on the same seeds, and a small causal Transformer, each by
:func:`learnwin.measure_window` (the budget protocol of docs/method.md §10b) at T 64.

    nice -n 5 python experiments/any_model_window.py run data/runs/any-model-t64 [MODEL]  # measure
    python experiments/any_model_window.py page data/runs/any-model-t64 > docs/results-any-model.md

``run`` writes each model's scores (one Parquet table per model, the workflow's "budget" schema)
under the folder; ``page`` prints the page from those tables alone.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from learnwin import build_model, measure_window
from learnwin.infra import io, resume
from learnwin.recovery.measure import window_of

T, HIDDEN = 64, 32
#: lags denser where the windows end, budgets 64 .. 4096 (small enough for 2 shared cores)
SETTINGS = dict(T=T, lags=[1, 3, 5, 7, 11, 15, 23, 31, 47, 63], budgets=[64 * 2**k for k in range(7)],
                seeds=[2, 12, 22])
THRESHOLD = 0.2  # the middle one, as the workflow's figures read it


def learnwin_lstm(input_size: int) -> nn.Module:
    """learnwin's LSTM with its readout, as the workflow builds it (docs/method.md §2)."""
    return build_model("lstm", input_size, hidden=HIDDEN)


def torch_lstm(input_size: int) -> nn.Module:
    """torch's ``nn.LSTM`` (cuDNN's cell on a GPU); measure_window adds the linear readout."""
    return nn.LSTM(input_size, HIDDEN, batch_first=True)


class CausalTransformer(nn.Module):
    """A small causal Transformer: a linear embedding plus fixed sinusoidal positions, two
    ``nn.TransformerEncoder`` layers (width 32, 4 heads, no dropout) under a causal mask; its
    features get measure_window's readout."""

    def __init__(self, input_size: int, width: int = HIDDEN, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Linear(input_size, width)
        step = torch.arange(T, dtype=torch.float32)[:, None]
        freq = torch.exp(-math.log(10_000.0) * torch.arange(0, width, 2, dtype=torch.float32) / width)
        self.register_buffer("positions", torch.cat([torch.sin(step * freq), torch.cos(step * freq)], dim=1))
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=2 * width, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(steps, device=x.device)
        return self.encoder(self.embed(x) + self.positions[:steps], mask=mask, is_causal=True)


MODELS = {"lstm": learnwin_lstm, "torch_lstm": torch_lstm, "transformer": CausalTransformer}


def run(folder: Path, models: list[str]) -> None:
    """Measure each of ``models`` (of :data:`MODELS`; none: all) and write its scores to
    ``folder``/<model>.parquet (one process per model may run beside the others)."""
    torch.set_num_threads(1)
    for name in models or MODELS:
        make, path = MODELS[name], folder / f"{name}.parquet"
        if path.exists():
            continue
        window = measure_window(make, name=name, resume=folder / ".resume" / name, **SETTINGS)
        io.write_table(window.scores, path, "budget")
        resume.clear(folder / ".resume" / name)


def page(folder: Path) -> str:
    """The page of docs/results-any-model.md from the scores in ``folder``."""
    scores = pd.concat([io.read_table(folder / f"{name}.parquet", "budget") for name in MODELS], ignore_index=True)
    w = window_of(scores, (0.1, 0.2, 0.3), SETTINGS["budgets"])
    at = w.window[np.isclose(w.window["threshold"], THRESHOLD)]
    H = at.pivot_table(index="N", columns="model", values="H_emp",
                       aggfunc=lambda h: f"{'/'.join(map(str, h))} ({h.mean():.1f})")[list(MODELS)]
    trained = scores[scores["target"] == "task"].groupby("model")["lag"].nunique().reindex(list(MODELS))
    growth = w.growth[np.isclose(w.growth["threshold"], THRESHOLD)].set_index("model").reindex(list(MODELS))
    mean = at.groupby(["model", "N"])["H_emp"].mean().unstack("N").reindex(list(MODELS))
    first = {m: next((n for n, h in row.items() if h > 0), None) for m, row in mean.iterrows()}
    top = mean.columns[-1]
    lead = ("; ".join(f"{m} {row[top]:.1f}" for m, row in mean.iterrows())
            + "; the first budget with a learned prefix in the seed mean: "
            + "; ".join(f"{m} {n}" for m, n in first.items()))
    lines = [
        "# The measured window of any model: torch's LSTM and a small causal Transformer",
        "",
        "Regenerate: `nice -n 5 python experiments/any_model_window.py run data/runs/any-model-t64` (measures;",
        "the raw scores are committed there) and `python experiments/any_model_window.py page data/runs/any-model-t64",
        "> docs/results-any-model.md` (this page, from those tables alone).",
        "",
        "Each model ran through `learnwin.measure_window`, the budget protocol of docs/method.md §10b (one online",
        "pass over fresh sequences per lag, the paired init, the shuffled-target control, the score and its",
        "permutation null, early stop and the frontier rule) on the single-lag task at T = 64, D = 8, lags",
        f"{', '.join(map(str, SETTINGS['lags']))}, budgets {SETTINGS['budgets'][0]}..{SETTINGS['budgets'][-1]} (the window reported to",
        f"{SETTINGS['budgets'][-2]}), AdamW (lr 0.005), batch 32, seeds {', '.join(map(str, SETTINGS['seeds']))};",
        "`lstm` is learnwin's LSTM (hidden 32, layer norm), `torch_lstm` torch's `nn.LSTM` (hidden 32, with",
        "the linear readout measure_window adds), `transformer` two `nn.TransformerEncoder` layers (width 32,",
        "4 heads, no dropout) under a causal mask with sinusoidal positions.",
        "",
        "**A lead, not a finding**: no rule for these models was committed before they ran, and three",
        "seeds at one size decide nothing (docs/method.md §10c). The runs shared 2 CPU cores with other",
        "work (the scores' `seconds` are inflated wall times).",
        "",
        f"What the tables below show, as a lead: the mean H at N = {top} is {lead}.",
        "",
        f"## H(N), the learned prefix (threshold {THRESHOLD}; seeds {'/'.join(map(str, SETTINGS['seeds']))}, "
        "their mean in brackets)",
        "",
        "| N | " + " | ".join(H.columns) + " |",
        "|---|" + "---|" * len(H.columns),
        *[f"| {n} | " + " | ".join(str(v) for v in row) + " |" for n, row in H.iterrows()],
        "",
        f"## Growth per model (§10c's rule; threshold {THRESHOLD})",
        "",
        "| model | lags trained | c_mean | c t-interval | n_seeds | verdict | cut off |",
        "|---|---|---|---|---|---|---|",
        *[f"| {m} | {trained[m]} | {g.c_mean:.2f} | [{g.c_t_lo:.2f}, {g.c_t_hi:.2f}] | {g.n_seeds} | {g.verdict} "
          f"| {g.cut_off} |" for m, g in growth.iterrows()],
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["run", "page"])
    parser.add_argument("folder", type=Path)
    parser.add_argument("models", nargs="*", help=f"run: these models only (of {', '.join(MODELS)})")
    args = parser.parse_args(argv)
    if set(args.models) - set(MODELS):
        parser.error(f"unknown models {sorted(set(args.models) - set(MODELS))}; allowed: {', '.join(MODELS)}")
    if args.action == "run":
        run(args.folder, args.models)
    else:
        sys.stdout.write(page(args.folder))


if __name__ == "__main__":
    main()
