"""Figures of training (docs/method.md §3, §4, §6): learning curves (figure 8) and the envelope and
tail index across snapshot epochs (figure 12)."""

from __future__ import annotations

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from learnwin.plots.style import (
    MODEL_COLORS,
    draw_band,
    log_ok,
    model_legend,
    no_data,
    saved,
    seed_band,
    sel,
    subplots,
)


@saved
def plot_learning_curves(curve, *, models, optimizers) -> Figure:
    """Figure 8: learning curves, MSE (log y) and R^2 against epoch, train (dashed) and
    validation (solid), mean ± 1 std over seeds (docs/method.md §3)."""
    fig, axes = subplots(len(optimizers), 2)
    for row, opt in enumerate(optimizers):
        for col, metric in enumerate(["mse", "r2"]):
            ax, drawn = axes[row, col], False
            for model in models:
                sub = sel(curve, optimizer=opt, model=model)
                color = MODEL_COLORS.get(model, "k")
                drawn |= draw_band(ax, seed_band(sub, "epoch", f"val_{metric}"), "epoch", color)
                drawn |= draw_band(
                    ax, seed_band(sub, "epoch", f"train_{metric}"), "epoch", color, ls="--", lw=1
                )
            if not drawn:
                no_data(ax)
            elif metric == "mse":
                log_ok(ax, "y")
            ax.set_xlabel("epoch")
            ax.set_ylabel("MSE" if metric == "mse" else "$R^2$")
            ax.set_title(f"{opt}: {'MSE' if metric == 'mse' else '$R^2$'}")
    model_legend(
        fig,
        models,
        [
            Line2D([], [], color="k", lw=1.4, label="validation"),
            Line2D([], [], color="k", ls="--", lw=1, label="train"),
        ],
    )
    return fig


@saved
def plot_epochs(envelope, alpha, *, models, optimizers, epochs) -> Figure:
    """Figure 12: envelope f(l) (upper row of each pair) and reliable tail index alpha(l)
    (lower row) at every snapshot epoch, colour = epoch, mean over seeds: how the envelope
    and the tails evolve during training (the self-organisation conjecture; docs/method.md §4, §6)."""
    cmap = mpl.colormaps["viridis"]
    # viridis up to 0.85: its last, pale yellow is hard to see on white
    shades = {str(e): cmap(0.85 * i / max(len(epochs) - 1, 1)) for i, e in enumerate(epochs)}
    reliable = alpha[alpha["reliable"].astype(bool)] if len(alpha) else alpha
    fig, axes = subplots(2 * len(optimizers), len(models))
    for i, opt in enumerate(optimizers):
        for col, model in enumerate(models):
            env_ax, alpha_ax = axes[2 * i, col], axes[2 * i + 1, col]
            env_drawn = alpha_drawn = False
            for epoch, shade in shades.items():
                env = sel(envelope, optimizer=opt, model=model, epoch=epoch)
                env_drawn |= draw_band(
                    env_ax, seed_band(env, "lag", "f"), "lag", shade, label=f"epoch {epoch}", lw=1.2
                )
                tails = sel(reliable, optimizer=opt, model=model, epoch=epoch)
                alpha_drawn |= draw_band(
                    alpha_ax, seed_band(tails, "lag", "alpha"), "lag", shade, lw=1.2
                )
            if env_drawn:
                log_ok(env_ax, "y")
                env_ax.legend(loc="best", frameon=False)
            else:
                no_data(env_ax)
            if not alpha_drawn:
                no_data(alpha_ax)
            alpha_ax.set_ylim(0.95, 2.05)
            env_ax.set(xlabel="lag $l$", ylabel="envelope $f(l)$", title=f"{model}, {opt}")
            alpha_ax.set(xlabel="lag $l$", ylabel=r"$\hat\alpha(l)$ (reliable)")
    return fig
