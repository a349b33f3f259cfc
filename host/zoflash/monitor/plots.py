"""The plot of a run: loss, test accuracy (not for mse) and q against forward passes (matplotlib,
optional)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from zoflash.monitor.telemetry import has_accuracy


def plot_run(records: list[dict], out: str | Path, title: str = "") -> Path | None:
    """Loss, test accuracy (if the loss has one) and q against cumulative forward passes. None
    without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if any(r["type"] == "continual" for r in records):  # --mode continual: its own timeline
        return plot_continual(records, out, title, plt)
    steps = [r for r in records if r["type"] == "step"]
    evals = [r for r in records if r["type"] == "eval"]
    accuracy = has_accuracy(records)  # mse runs have none: loss and q only
    ratios = [3, 3, 1.5] if accuracy else [3, 1.5]
    fig, axes = plt.subplots(
        len(ratios), 1, figsize=(8, 8 if accuracy else 5.5), sharex=True, gridspec_kw={"height_ratios": ratios}
    )
    x = [r["prefix_passes"] + r["suffix_passes"] for r in steps]
    loss = np.array([r["loss"] for r in steps])
    axes[0].plot(x, loss, lw=0.6, alpha=0.4, label="step mean loss")
    if len(loss) >= 10:
        k = max(5, len(loss) // 50)
        smooth = np.convolve(loss, np.ones(k) / k, mode="valid")
        axes[0].plot(x[k - 1 :], smooth, lw=1.5, label=f"moving mean ({k} steps)")
    ex = [r["prefix_passes"] + r["suffix_passes"] for r in evals]
    axes[0].plot(ex, [r["loss"] for r in evals], "o-", ms=3, label="test loss")
    if evals and all("val_loss" in r for r in evals):
        axes[0].plot(ex, [r["val_loss"] for r in evals], "s--", ms=3, label="validation loss")
    trial = [k for k, r in enumerate(steps) if r.get("trial")]
    if trial:  # the lr trial's candidates restart from the same weights: shade them apart
        start = x[trial[0] - 1] if trial[0] > 0 else 0
        for ax in axes:
            ax.axvspan(start, x[trial[-1]], color="0.85", zorder=0, label="lr trial" if ax is axes[0] else None)
    axes[0].set_ylabel("loss")
    axes[0].legend(fontsize=8)
    if accuracy:
        axes[1].plot(ex, [100 * r["accuracy"] for r in evals], "o-", ms=3, color="tab:green", label="test")
        if evals and all("val_accuracy" in r for r in evals):
            axes[1].plot(
                ex, [100 * r["val_accuracy"] for r in evals], "s--", ms=3, color="tab:olive", label="validation"
            )
            axes[1].legend(fontsize=8)
        axes[1].set_ylabel("accuracy (%)")
        axes[1].grid(alpha=0.3)
    axes[-1].step(x, [r["q"] for r in steps], where="post", color="tab:purple")
    axes[-1].set_yscale("log", base=2)
    axes[-1].set_ylabel("q")
    axes[-1].set_xlabel("forward passes (prefix + suffix sample-passes)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# --- continual adaptation: serving accuracy over the stream, the decisions as a timeline
_DECISION_STYLE = {
    "suspected": ("tab:orange", ":", "drift suspected"),
    "episode": ("tab:gray", "-", "episode starts"),
    "accepted": ("tab:green", "-", "candidate promoted"),
    "rejected": ("tab:red", "--", "candidate discarded"),
    "rollback": ("tab:purple", "-", "rollback to factory"),
}


def plot_continual(records: list[dict], out: str | Path, title: str, plt) -> Path:
    """Serving accuracy of the deployed weights per window against the samples served, the
    decisions as vertical lines and a timeline row each, the deployed generation as a step line."""
    cl = [r for r in records if r["type"] == "continual"]
    windows = [r for r in cl if r["decision"] == "window"]
    fig, axes = plt.subplots(2, 1, figsize=(10, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1.6]})
    axes[0].plot(
        [r["sample"] for r in windows],
        [100 * r["correct"] / max(1, r["count"]) for r in windows],
        lw=1.2,
        label="serving accuracy (deployed weights)",
    )
    axes[0].set_ylabel("accuracy %")
    axes[0].grid(alpha=0.3)
    names = list(_DECISION_STYLE)
    seen = set()
    for r in cl:
        style = _DECISION_STYLE.get(r["decision"])
        if style is None:
            continue
        color, ls, label = style
        axes[0].axvline(r["sample"], color=color, ls=ls, lw=0.8, label=None if label in seen else label)
        axes[1].plot([r["sample"]], [names.index(r["decision"])], "|", color=color, ms=14, mew=2)
        seen.add(label)
    axes[0].legend(loc="lower left", fontsize=7)
    gen = [(r["sample"], r["generation"]) for r in cl]
    ax2 = axes[1].twinx()
    ax2.step([g[0] for g in gen], [g[1] for g in gen], where="post", color="black", lw=0.8)
    ax2.set_ylabel("deployed generation", fontsize=8)
    axes[1].set_yticks(range(len(names)), [_DECISION_STYLE[n][2] for n in names], fontsize=7)
    axes[1].set_ylim(-0.7, len(names) - 0.3)
    axes[1].set_xlabel("samples served")
    if title:
        fig.suptitle(textwrap.fill(title, 150), fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)
