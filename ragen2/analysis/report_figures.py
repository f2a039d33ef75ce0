"""The figures of the run report (``ragen2-report RUN_DIR``), each a matplotlib ``Figure``.

Curves over steps (:data:`CURVES`): one figure per topic, each line a ``metrics.jsonl`` key (its
``gid``); a line with ``band`` draws the interval between two more keys (the fixed panel's 95%
bootstrap interval) as a shaded band. Every MI curve also draws its floor (the permutation null's
95th percentile, ``*mi_floor``) and its bound (log of the distinct prompts, ``*mi_bound``), on a
y-range holding 0, both and the curve. Steps where a collapse alert fired (``collapse/alert`` = 1, red dotted)
and where a rollback happened (``collapse/rollback`` = 1, purple dash-dot) are vertical lines on
every curve. A figure whose
keys the run never logged is not drawn (:func:`curve_figure` returns None); the report says so.

Also: the diagnosis timeline (``collapse/diagnosis`` codes, labels from ``DIAGNOSIS_CODES``)
and the tiered SNR grades (``snr/frac_*`` stacked, ``snr/mean`` +- ``snr/std``, thresholds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ragen2.analysis.rollouts import metric_series
from ragen2.collapse.diagnosis import DIAGNOSIS_CODES

__all__ = ["CURVES", "Curve", "Line", "curve_figure", "diagnosis_figure", "diagnosis_rows",
           "event_steps", "snr_figure"]

Metrics = dict[int, dict[str, Any]]
ALERT, ROLLBACK = "collapse/alert", "collapse/rollback"


@dataclass(frozen=True)
class Line:
    """One plotted key; ``band`` = (lower key, upper key); ``right`` = on the second y-axis."""

    key: str
    label: str
    dashed: bool = False
    band: tuple[str, str] | None = None
    right: bool = False

    def keys(self) -> tuple[str, ...]:
        return (self.key, *(self.band or ()))


@dataclass(frozen=True)
class Curve:
    name: str
    title: str
    ylabel: str
    lines: tuple[Line, ...]
    ylim: tuple[float, float] | None = None
    ylabel_right: str | None = None
    mi: bool = False  # an MI curve: the y-range holds 0, the curve, its floor and its bound


    def keys(self) -> list[str]:
        return [k for line in self.lines for k in line.keys()]


def _panel(key: str, label: str, **kw) -> Line:
    return Line(key, label, band=(f"{key}_lo", f"{key}_hi"), **kw)


def _floor_and_bound(prefix: str) -> tuple[Line, Line]:
    """The floor (the permutation null's 95th percentile) and the bound (log of the distinct
    prompts) of the MI logged under ``prefix``."""
    return (Line(f"{prefix}mi_floor", f"floor: null q95 ({prefix}mi_floor)", dashed=True),
            Line(f"{prefix}mi_bound", f"bound: log distinct prompts ({prefix}mi_bound)", dashed=True))


CURVES: tuple[Curve, ...] = (
    Curve("success", "success", "success rate",
          (Line("rollout/success", "train (rollout/success)"),
           Line("eval/success", "held-out (eval/success)")), ylim=(-0.02, 1.02)),
    Curve("mi", "MI between prompt and reasoning (rollout batch)", "nats",
          (Line("collapse/mi", "collapse/mi"), *_floor_and_bound("collapse/")), mi=True),
    Curve("panel_mi", "MI on the fixed panel, 95% bootstrap band", "nats",
          (_panel("collapse/panel/mi", "collapse/panel/mi"), *_floor_and_bound("collapse/panel/")),
          mi=True),
    Curve("panel_turns_mi", "MI at later turns, fixed mid-episode panel, 95% bootstrap band", "nats",
          (_panel("collapse/panel/turns/mi", "collapse/panel/turns/mi"),
           *_floor_and_bound("collapse/panel/turns/")), mi=True),
    Curve("retrieval", "retrieval of the prompt from its reasoning", "accuracy@1",
          (Line("collapse/retrieval_acc@1", "collapse/retrieval_acc@1"),
           Line("collapse/retrieval_chance@1", "chance (collapse/retrieval_chance@1)", dashed=True),
           _panel("collapse/panel/retrieval_acc@1", "fixed panel (collapse/panel/retrieval_acc@1)")),
          ylim=(-0.02, 1.02)),
    Curve("grounding", "does the reasoning state the true state (env's ground hook), 95% "
          "bootstrap band over prompts", "share of true claims",
          (_panel("collapse/turns/grounding/frac", "later turns, batch (collapse/turns/grounding/frac)"),
           _panel("collapse/panel/turns/grounding/frac",
                  "later turn, fixed panel (collapse/panel/turns/grounding/frac)"),
           Line("collapse/grounding/frac", "first turn, batch (collapse/grounding/frac)", dashed=True),
           Line("collapse/panel/grounding/frac",
                "first turn, fixed panel (collapse/panel/grounding/frac)", dashed=True)),
          ylim=(-0.02, 1.02)),
    Curve("contrast", "can the reasoning tell apart inputs of the same map that differ in one "
          "coordinate (the contrast, ragen2.collapse.contrast), 95% bootstrap band over prompts",
          "acc@1 among them",
          (_panel("collapse/panel/turns/contrast/col/acc@1",
                  "column, later-turn panel (collapse/panel/turns/contrast/col/acc@1)"),
           _panel("collapse/panel/turns/contrast/row/acc@1",
                  "row, later-turn panel (collapse/panel/turns/contrast/row/acc@1)"),
           Line("collapse/turns/contrast/col/acc@1",
                "column, later turns, batch (collapse/turns/contrast/col/acc@1)"),
           Line("collapse/panel/turns/contrast/col/chance@1",
                "chance, column, panel (collapse/panel/turns/contrast/col/chance@1)", dashed=True)),
          ylim=(-0.02, 1.02)),
    Curve("entropy", "entropy", "token entropy (nats / token)",
          (Line("collapse/token_entropy", "collapse/token_entropy"),
           _panel("collapse/panel/h_cond", "fixed panel H(Z|X) (collapse/panel/h_cond)",
                  right=True)), ylabel_right="H(Z|X) (nats)"),
    Curve("reward_spread", "reward spread within groups", "",
          (Line("rollout/group_reward_std_mean", "mean within-group std (rollout/group_reward_std_mean)"),
           Line("rollout/zero_std_group_frac", "share of zero-spread groups (rollout/zero_std_group_frac)",
                dashed=True))),
    Curve("kept_ratio", "share of groups the filter keeps", "kept ratio",
          (Line("filter/kept_ratio", "filter/kept_ratio"),), ylim=(-0.02, 1.02)),
    Curve("action_mi", "does the action follow the reasoning", "nats",
          (Line("collapse/action/mi", "collapse/action/mi"),
           *_floor_and_bound("collapse/action/")), mi=True),
)


def event_steps(metrics: Metrics, key: str) -> list[int]:
    """The steps where ``key`` (an alert or rollback flag) was logged as 1."""
    return [s for s, v in metric_series(metrics, key) if v >= 0.5]


def _finish(ax, title: str, ylabel: str) -> None:
    ax.set_title(title, fontsize="medium")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)


def _events(ax, metrics: Metrics) -> None:
    for key, color, ls, label in ((ALERT, "red", ":", "collapse alert"),
                                  (ROLLBACK, "purple", "-.", "rollback")):
        for i, s in enumerate(event_steps(metrics, key)):
            ax.axvline(s, color=color, alpha=0.6, lw=1.2, ls=ls, label=label if i == 0 else None)


def curve_figure(curve: Curve, metrics: Metrics) -> Figure | None:
    """The figure of one curve, or None when the run logged none of its lines' keys."""
    drawn = [(line, metric_series(metrics, line.key)) for line in curve.lines]
    drawn = [(line, s) for line, s in drawn if s]
    if not drawn:
        return None
    fig = Figure(figsize=(6.4, 3.7), layout="constrained")
    ax = fig.add_subplot()
    ax2 = ax.twinx() if any(line.right for line, _ in drawn) else None
    shown: list[float] = []
    for line, series in drawn:
        axis = ax2 if line.right else ax
        xs, ys = zip(*series)
        color = f"C{curve.lines.index(line)}"
        axis.plot(xs, ys, color=color, ls="--" if line.dashed else "-",
                  marker="" if line.dashed else "o", ms=3, label=line.label, gid=line.key)
        shown += ys
        if line.band is not None:
            lo, hi = (dict(metric_series(metrics, k)) for k in line.band)
            steps = [s for s in xs if s in lo and s in hi]
            if steps:
                axis.fill_between(steps, [lo[s] for s in steps], [hi[s] for s in steps],
                                  color=color, alpha=0.2, label=f"95% interval ({line.band[0]}, _hi)")
                shown += [lo[s] for s in steps] + [hi[s] for s in steps]
    _events(ax, metrics)
    if curve.ylim is not None:
        ax.set_ylim(*curve.ylim)
    elif curve.mi:  # not autoscaled to the curve alone: floor and bound stay in view
        from ragen2.analysis.study import mi_ylim

        ax.set_ylim(*mi_ylim(shown))
    _finish(ax, curve.title, curve.ylabel)
    handles, labels = ax.get_legend_handles_labels()
    if ax2 is not None:
        ax2.set_ylabel(curve.ylabel_right or "")
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    (ax2 or ax).legend(handles, labels, fontsize="x-small")  # on the top axes: above both
    return fig


def _label(code: float) -> str:
    names = {v: k for k, v in DIAGNOSIS_CODES.items()}
    if float(code).is_integer() and int(code) in names:
        return names[int(code)]
    return f"code {code:g} (unknown)"


def diagnosis_rows(metrics: Metrics) -> list[dict[str, Any]]:
    """One row per step with a diagnosis, an alert or a rollback:
    ``{"step", "code", "label", "alert", "rollback"}`` (code/label None where not diagnosed)."""
    diag = dict(metric_series(metrics, "collapse/diagnosis"))
    alerts, rollbacks = set(event_steps(metrics, ALERT)), set(event_steps(metrics, ROLLBACK))
    return [{"step": s, "code": diag.get(s), "label": _label(diag[s]) if s in diag else None,
             "alert": s in alerts, "rollback": s in rollbacks}
            for s in sorted(set(diag) | alerts | rollbacks)]


def diagnosis_figure(metrics: Metrics) -> Figure | None:
    """Diagnosis label per evaluation step (one row per label), alert and rollback markers."""
    rows = diagnosis_rows(metrics)
    if not rows:
        return None
    labels = list(DIAGNOSIS_CODES) + sorted({r["label"] for r in rows if r["label"]}
                                             - set(DIAGNOSIS_CODES))
    fig = Figure(figsize=(9, 2.6), layout="constrained")
    ax = fig.add_subplot()
    diag = [r for r in rows if r["label"] is not None]
    if diag:
        ax.step([r["step"] for r in diag], [labels.index(r["label"]) for r in diag], where="post",
                color="0.6", lw=1)
        ax.scatter([r["step"] for r in diag], [labels.index(r["label"]) for r in diag],
                   c=[f"C{labels.index(r['label'])}" for r in diag], s=30, zorder=3)
    _events(ax, metrics)
    ax.set_yticks(range(len(labels)), [lab.replace("_", " ") for lab in labels])
    ax.set_ylim(-0.5, len(labels) - 0.5)
    _finish(ax, "diagnosis at each evaluation (collapse/diagnosis)", "")
    if any(r["alert"] or r["rollback"] for r in rows):
        ax.legend(fontsize="x-small", loc="upper left")
    return fig


def snr_figure(metrics: Metrics) -> Figure | None:
    """The tiered SNR grades over steps: shares low / medium / high stacked, SNR mean +- std and
    the grade thresholds; None without ``snr/frac_*`` metrics."""
    fracs = {g: dict(metric_series(metrics, f"snr/frac_{g}")) for g in ("low", "medium", "high")}
    steps = sorted(set.intersection(*(set(f) for f in fracs.values())))
    if not steps:
        return None
    fig = Figure(figsize=(8.5, 3.7), layout="constrained")
    ax = fig.add_subplot()
    ax.stackplot(steps, *([fracs[g][s] for s in steps] for g in fracs),
                 labels=[f"share {g} (snr/frac_{g})" for g in fracs],
                 colors=["#f4a6a0", "#f7d58b", "#9fd49a"], alpha=0.7)
    mean, std = dict(metric_series(metrics, "snr/mean")), dict(metric_series(metrics, "snr/std"))
    ms = [s for s in steps if s in mean]
    if ms:
        ax.plot(ms, [mean[s] for s in ms], color="k", marker="o", ms=3, label="SNR mean (snr/mean)")
        band = [s for s in ms if s in std]
        ax.fill_between(band, [mean[s] - std[s] for s in band], [mean[s] + std[s] for s in band],
                        color="k", alpha=0.12, label="± snr/std")
    for key, ls in (("snr/threshold_low", ":"), ("snr/threshold_high", "--")):
        series = metric_series(metrics, key)
        if series:
            ax.plot(*zip(*series), color="0.3", ls=ls, lw=1, label=key)
    ax.set_ylim(0, 1)
    _finish(ax, "tiered SNR grades of the prompt pool", "share of prompts / SNR")
    ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig
