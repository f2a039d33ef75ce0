"""PNG plots of one run over training steps (matplotlib, Agg canvas: no display needed).

One file per panel, plus ``overview.png`` with every drawn panel:
    success.png              train success (rollout/success) and held-out success (eval/success)
    mi.png                   online MI (collapse/mi), the later-turn panel's (collapse/panel/turns/mi)
                             and plug-in MI, each with its floor (null q95, dashed) and its
                             bound (log distinct prompts, dotted)
    conditional_entropy.png  online H(Z|X) (collapse/h_cond) and plug-in H(cluster | input)
    token_entropy.png        actor/entropy and collapse/token_entropy
    reward_spread.png        within-group reward std (metrics, and recomputed from saved rollouts)
    snr.png                  SNR mean +- std band, share of high / low SNR prompts (snr/*)

A panel without any data is not written; ``write_plots`` says why for each skipped panel.
Inputs: ``metrics`` as from ``load_metrics``, ``records`` = the per-step plug-in records of
``ragen2.analysis.analyze`` (dicts with "step" and the plotted fields).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ragen2.analysis.rollouts import metric_series

__all__ = ["PANELS", "write_plots"]

Metrics = dict[int, dict[str, Any]]
Records = list[dict[str, Any]]


def _plot(ax, series: list[tuple[int, float]], label: str, **kw) -> bool:
    if not series:
        return False
    xs, ys = zip(*series)
    ax.plot(xs, ys, label=label, marker=kw.pop("marker", "o"), markersize=3, **kw)
    return True


def _rec(records: Records, key: str) -> list[tuple[int, float]]:
    return [(r["step"], r[key]) for r in records if r.get(key) is not None]


def _finish(ax, title: str, ylabel: str, *extra_axes) -> None:
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    handles, labels = [], []
    for a in (ax, *extra_axes):
        h, lab = a.get_legend_handles_labels()
        handles += h
        labels += lab
    if handles:
        ax.legend(handles, labels, fontsize="small")


def _success(ax, metrics: Metrics, records: Records) -> bool:
    drew = _plot(ax, metric_series(metrics, "rollout/success", min_step=1), "train (rollout/success)")
    drew |= _plot(ax, metric_series(metrics, "eval/success"), "held-out (eval/success)")
    ax.set_ylim(-0.02, 1.02)
    _finish(ax, "success", "success rate")
    return drew


def _mi(ax, metrics: Metrics, records: Records) -> bool:
    """Each MI estimate with its floor (the permutation null's 95th percentile, dashed) and its
    bound (log of the distinct prompts, dotted); the y-range holds all of them (``gid`` = key)."""
    from ragen2.analysis.study import mi_ylim

    drew = False
    for color, prefix, name in (("C0", "collapse/", "online MI (first turn)"),
                                ("C2", "collapse/panel/turns/", "later-turn panel MI")):
        drew |= _plot(ax, metric_series(metrics, prefix + "mi"), name, color=color, gid=prefix + "mi")
        drew |= _plot(ax, metric_series(metrics, prefix + "mi_floor"), f"{name}: floor (null q95)",
                      color=color, linestyle="--", marker="", gid=prefix + "mi_floor")
        drew |= _plot(ax, metric_series(metrics, prefix + "mi_bound"), f"{name}: bound log N",
                      color=color, linestyle=":", marker="", gid=prefix + "mi_bound")
    drew |= _plot(ax, _rec(records, "mi"), "plug-in MI (Miller-Madow)", color="C1", gid="plugin:mi")
    drew |= _plot(ax, _rec(records, "mi_floor_q95"), "plug-in floor (null q95)", color="C1",
                  linestyle="--", marker="", gid="plugin:mi_floor_q95")
    drew |= _plot(ax, _rec(records, "log_n_inputs"), "plug-in bound log N", color="C1",
                  linestyle=":", marker="", gid="plugin:log_n_inputs")
    ys = [float(y) for line in ax.get_lines() for y in line.get_ydata()]
    if ys:
        ax.set_ylim(*mi_ylim(ys))
    _finish(ax, "mutual information I(input; reasoning)", "nats")
    return drew


def _conditional_entropy(ax, metrics: Metrics, records: Records) -> bool:
    online = metric_series(metrics, "collapse/h_cond")
    plugin = _rec(records, "h_cond")
    drew = _plot(ax, online, "online H(Z|X) (collapse/h_cond)", color="C0")
    ax2 = ax.twinx() if online and plugin else ax  # different units: own axis when both exist
    drew |= _plot(ax2, plugin, "plug-in H(cluster | input)", color="C1")
    if ax2 is not ax:
        ax2.set_ylabel("plug-in, nats")
    _finish(ax, "conditional entropy of reasoning given input", "nats",
            *([ax2] if ax2 is not ax else []))
    return drew


def _token_entropy(ax, metrics: Metrics, records: Records) -> bool:
    drew = _plot(ax, metric_series(metrics, "actor/entropy"), "actor/entropy")
    drew |= _plot(ax, metric_series(metrics, "collapse/token_entropy"), "collapse/token_entropy")
    _finish(ax, "policy token entropy", "nats / token")
    return drew


def _reward_spread(ax, metrics: Metrics, records: Records) -> bool:
    drew = _plot(ax, metric_series(metrics, "rollout/group_reward_std_mean"),
                 "within-group std (metrics)")
    drew |= _plot(ax, metric_series(metrics, "rollout/reward_std"), "batch std (metrics)",
                  linestyle=":")
    drew |= _plot(ax, _rec(records, "reward_spread"), "within-group std (saved rollouts)",
                  linestyle="", marker="x")
    _finish(ax, "reward spread", "reward std")
    return drew


def _snr(ax, metrics: Metrics, records: Records) -> bool:
    mean = metric_series(metrics, "snr/mean")
    std = dict(metric_series(metrics, "snr/std"))
    drew = _plot(ax, mean, "SNR mean", color="C0")
    band = [(s, m) for s, m in mean if s in std]
    if band:
        xs = [s for s, _ in band]
        ax.fill_between(xs, [m - std[s] for s, m in band], [m + std[s] for s, m in band],
                        color="C0", alpha=0.2, label="mean +- std")
    high = metric_series(metrics, "snr/frac_high")
    low = metric_series(metrics, "snr/frac_low")
    ax2 = ax.twinx() if high or low else None
    if ax2 is not None:
        drew |= _plot(ax2, high, "share high", color="C2", linestyle="--")
        drew |= _plot(ax2, low, "share low", color="C3", linestyle="--")
        ax2.set_ylim(-0.02, 1.02)
        ax2.set_ylabel("share of prompts")
    _finish(ax, "SNR distribution", "SNR", *([ax2] if ax2 is not None else []))
    return drew


# name -> (draw function, why it is skipped when it drew nothing)
PANELS: dict[str, tuple[Callable[[Any, Metrics, Records], bool], str]] = {
    "success": (_success, "no rollout/success or eval/success metrics"),
    "mi": (_mi, "no collapse/mi metrics and no saved rollouts"),
    "conditional_entropy": (_conditional_entropy, "no collapse/h_cond metrics and no saved rollouts"),
    "token_entropy": (_token_entropy, "no actor/entropy or collapse/token_entropy metrics"),
    "reward_spread": (_reward_spread, "no reward-spread metrics and no saved rollouts"),
    "snr": (_snr, "no snr/* metrics (tiered SNR filtering was off)"),
}


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=100)


def write_plots(metrics: Metrics, records: Records, out_dir: str | Path
                ) -> tuple[dict[str, str], dict[str, str]]:
    """Write one PNG per panel with data, and ``overview.png`` with all of them, into out_dir.

    Returns:
        (written, skipped): panel name -> file path; panel name -> why it was not drawn.
        ``overview`` is in ``written`` when at least one panel was drawn.
    """
    out = Path(out_dir)
    written: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name, (draw, why) in PANELS.items():
        fig = Figure(figsize=(6, 4), layout="constrained")
        if draw(fig.add_subplot(), metrics, records):
            _save(fig, out / f"{name}.png")
            written[name] = str(out / f"{name}.png")
        else:
            skipped[name] = why
    if written:
        cols = 3 if len(written) > 4 else 2 if len(written) > 1 else 1
        rows = -(-len(written) // cols)
        fig = Figure(figsize=(5 * cols, 3.6 * rows), layout="constrained")
        for i, name in enumerate(written):
            PANELS[name][0](fig.add_subplot(rows, cols, i + 1), metrics, records)
        _save(fig, out / "overview.png")
        written["overview"] = str(out / "overview.png")
    return written, skipped
