"""Paper figures from `tide bench` and `tide sim` results, with matplotlib.

    python -m tide.plot RESULTS.csv [-o OUT.pdf|.png|.svg] [--x budget]
                        [--y tok_s] [--series policy] [--facet KEY]

RESULTS.csv is a `tide bench` results.csv (or its folder, or a folder of
result folders: the newest), or a `tide sim --csv` file. Rows that share a
configuration (the repeats of `--repeats N`) become one point at their median
with a min..max error bar. Where several configurations share a point (the
intervals of policy-tide against budget), the best by --y is drawn. Any
column can be --x, --series or --facet, including swept keys such as
generation.threshold. The no-offload baseline and tide sim's hindsight rows
(oracle, belady, best-static) are drawn as grey dashed bounds, not as
policies. An x axis of powers of two is log2. Colours are Okabe and Ito's
colour-blind-safe palette, each series with its own marker too.

From Python: tide.plot.plot("results.csv", "fig.pdf", facet="generation.threshold").
"""
import argparse
import math
import os
import statistics
import sys
from typing import Dict, List, Optional, Sequence

from .results import read_csv

# Okabe & Ito (2008), black last; markers cycle with a period coprime to 8,
# so colour x marker does not repeat below 56 series.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442",
           "#000000"]
MARKERS = ["o", "s", "^", "D", "v", "X", "P"]

# Short names for the common columns (bench first, then sim).
ALIASES = {
    "tok_s": ["tokens_per_second", "model_tok_per_s"],
    "tok/s": ["tokens_per_second", "model_tok_per_s"],
    "time": ["seconds", "model_ms_per_step"],
    "hit": ["hit_rate"],
}
LABELS = {
    "tokens_per_second": "tokens per second",
    "model_tok_per_s": "modelled tokens per second",
    "seconds": "time for the prompt set (s)",
    "model_ms_per_step": "modelled ms per step",
    "hit_rate": "hit rate",
    "budget": "experts per MoE layer on the device",
    "interval": "refresh interval (steps)",
}
# Measurements: never part of a configuration's identity.
MEASURED = {"tokens", "steps", "seconds", "hit_rate", "hit_rows", "miss_rows", "promotions",
            "evictions", "weight_bytes", "act_bytes", "host_seconds", "device_seconds",
            "tokens_per_second", "same_tokens", "repeat", "model_ms_per_step",
            "model_tok_per_s", "model_us", "replay_seconds"}
LOWER_IS_BETTER = ("seconds", "_ms_", "_us", "bytes", "miss", "promotions", "evictions")
BOUNDS = {"(no offload)": "no offload", "oracle": "oracle (bound)",
          "belady": "belady (hindsight)", "best-static": "best-static (hindsight)"}


class PlotError(Exception):
    """Bad input: a missing column, a file that is not results, an output
    format matplotlib cannot write. The message names the file."""


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotError("tide.plot needs matplotlib (pip install matplotlib, or "
                        "apt-get install python3-matplotlib): %s" % e) from e
    return plt


def find_results(path: str) -> str:
    """The results CSV for path: a file, a result folder (its results.csv)
    or a folder of result folders (the newest by name, a timestamp)."""
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise PlotError("%s: no such file or folder" % path)
    own = os.path.join(path, "results.csv")
    if os.path.isfile(own):
        return own
    runs = sorted(d for d in os.listdir(path)
                  if os.path.isfile(os.path.join(path, d, "results.csv")))
    if not runs:
        raise PlotError("%s has no results.csv, nor a result folder holding one" % path)
    return os.path.join(path, runs[-1], "results.csv")


def _column(name: str, columns: Sequence[str], path: str, flag: str) -> str:
    if name in columns:
        return name
    for c in ALIASES.get(name, []):
        if c in columns:
            return c
    raise PlotError("%s: no column '%s' for %s (columns: %s)" % (path, name, flag,
                                                                 ", ".join(columns)))


def _num(v) -> Optional[float]:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return None


def _pow2(v: float) -> bool:
    return v > 0 and math.frexp(v)[0] == 0.5


def log2_axis(values: Sequence[float]) -> bool:
    """Whether an axis over values is drawn log2: all positive powers of
    two, not all equal (as tide sim --plot and tide bench plot decide)."""
    return len(set(values)) > 1 and all(_pow2(v) for v in values)


def _fmt(v) -> str:
    return "%g" % v if isinstance(v, float) else str(v)


def aggregate(rows: List[Dict], columns: Sequence[str], x: str, y: str, series: str,
               facet: Optional[str]):
    """{facet: {series: {x: (median, min, max)}}}, repeats merged, the best
    configuration per point; and {facet: {bound name: median}}."""
    ident = [c for c in columns if c not in MEASURED and c != y]
    configs: Dict[tuple, List[Dict]] = {}
    for r in rows:
        configs.setdefault(tuple(r.get(c) for c in ident), []).append(r)
    lower = any(k in y for k in LOWER_IS_BETTER)
    data: Dict = {}
    bounds: Dict = {}
    for group in configs.values():
        ys = [_num(r[y]) for r in group]
        ys = [v for v in ys if v is not None and math.isfinite(v)]
        if not ys:
            continue
        r0 = group[0]
        fv = r0.get(facet) if facet else None
        name = r0.get(series)
        point = (statistics.median(ys), min(ys), max(ys))
        if series == "policy" and name in BOUNDS:
            bounds.setdefault(fv, {})
            old = bounds[fv].get(BOUNDS[name])
            if old is None or (point[0] < old if lower else point[0] > old):
                bounds[fv][BOUNDS[name]] = point[0]
            continue
        xv = _num(r0.get(x))
        if xv is None:
            continue
        pts = data.setdefault(fv, {}).setdefault(name, {})
        old = pts.get(xv)
        if old is None or (point[0] < old[0] if lower else point[0] > old[0]):
            pts[xv] = point
    return data, bounds


def plot(results: str, out: Optional[str] = None, x: str = "budget", y: str = "tok_s",
         series: str = "policy", facet: Optional[str] = None, title: Optional[str] = None,
         dpi: int = 150) -> str:
    """Draw results (see the module's doc) into out (.pdf, .png or .svg;
    default: plot.pdf beside the CSV). Returns the path written. Raises
    PlotError on bad input or a missing matplotlib."""
    path = find_results(results)
    if out is None:
        out = os.path.join(os.path.dirname(path) or ".", "plot.pdf")
    ext = os.path.splitext(out)[1].lower()
    if ext not in (".pdf", ".png", ".svg"):
        raise PlotError("%s: write .pdf, .png or .svg" % out)
    try:
        rows = read_csv(path)
    except (OSError, UnicodeDecodeError) as e:
        raise PlotError("%s: %s" % (path, e)) from e
    if not rows:
        raise PlotError("%s: no rows" % path)
    columns = list(rows[0].keys())
    x = _column(x, columns, path, "--x")
    y = _column(y, columns, path, "--y")
    series = _column(series, columns, path, "--series")
    if facet:
        facet = _column(facet, columns, path, "--facet")
    data, bounds = aggregate(rows, columns, x, y, series, facet)
    if not any(data.values()):
        raise PlotError("%s: no numeric '%s' against '%s' to draw" % (path, y, x))
    plt = _pyplot()
    facets = sorted(set(data) | set(bounds), key=lambda v: (str(type(v)), v))
    ncol = min(3, len(facets))
    nrow = (len(facets) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.0 * ncol + 1.6, 3.2 * nrow), sharey=True,
                             squeeze=False)
    names = []  # in the order the CSV first shows them, as tide bench plot draws them
    for f in data.values():
        names += [n for n in f if n not in names]
    style = {n: (PALETTE[i % len(PALETTE)], MARKERS[i % len(MARKERS)]) for i, n in
             enumerate(names)}
    xs_all = sorted({v for f in data.values() for s in f.values() for v in s})
    log2 = log2_axis(xs_all)
    dashes = [(6, 3), (2, 2), (8, 2, 2, 2)]
    for k, fv in enumerate(facets):
        ax = axes[k // ncol][k % ncol]
        for n, pts in data.get(fv, {}).items():
            xv = sorted(pts)
            med = [pts[v][0] for v in xv]
            err = [[pts[v][0] - pts[v][1] for v in xv], [pts[v][2] - pts[v][0] for v in xv]]
            col, mk = style[n]
            has_err = any(e > 0 for e in err[0] + err[1])
            ax.errorbar(xv, med, yerr=err if has_err else None, color=col, marker=mk,
                        markersize=5, linewidth=1.6, capsize=3, label=_fmt(n))
        for j, (bn, bv) in enumerate(sorted(bounds.get(fv, {}).items())):
            ax.axhline(bv, color="#666666", linewidth=2.2, dashes=dashes[j % len(dashes)],
                       label=bn, zorder=1)
        if log2:
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs_all)
            ax.set_xticklabels(["%g" % v for v in xs_all])
            ax.minorticks_off()
        if facet:
            ax.set_title("%s = %s" % (facet, _fmt(fv)), fontsize=10)
        ax.set_xlabel(LABELS.get(x, x) + (" (log2)" if log2 else ""), fontsize=9)
        if k % ncol == 0:
            ax.set_ylabel(LABELS.get(y, y), fontsize=9)
        ax.grid(True, color="#e4e4e4", linewidth=0.8)
        ax.tick_params(labelsize=8)
    for k in range(len(facets), nrow * ncol):
        axes[k // ncol][k % ncol].axis("off")
    handles, labels = {}, []
    for row in axes:
        for ax in row:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in handles:
                    handles[lab] = h
                    labels.append(lab)
    # Policies first, bounds after them.
    bound_names = set(BOUNDS.values())
    labels = [lab for lab in labels if lab not in bound_names] + \
        [lab for lab in labels if lab in bound_names]
    fig.legend([handles[lab] for lab in labels], labels, loc="center left",
               bbox_to_anchor=(1.0 - 1.5 / fig.get_figwidth(), 0.5), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1.0 - 1.6 / fig.get_figwidth(), 1))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tide.plot",
        description="Paper figures (PDF, PNG, SVG) from tide bench or tide sim results: "
        "median of repeats with min..max error bars, log2 axes for powers of two, "
        "bounds in grey, a colour-blind-safe palette with markers.")
    p.add_argument("results", help="results.csv of tide bench (or its folder, or a folder of "
                   "result folders), or a tide sim --csv file")
    p.add_argument("-o", "--out", help="output file: .pdf, .png or .svg (default: plot.pdf "
                   "beside the CSV)")
    p.add_argument("--x", default="budget", help="column on the x axis (default: budget)")
    p.add_argument("--y", default="tok_s", help="column on the y axis (default: tok_s, "
                   "meaning tokens_per_second or sim's model_tok_per_s; also time, hit)")
    p.add_argument("--series", default="policy", help="column whose values are the lines "
                   "(default: policy)")
    p.add_argument("--facet", help="column whose values are side-by-side panels, e.g. "
                   "generation.threshold")
    p.add_argument("--title", help="figure title")
    p.add_argument("--dpi", type=int, default=150, help="PNG resolution (default: 150)")
    a = p.parse_args(argv)
    try:
        out = plot(a.results, a.out, x=a.x, y=a.y, series=a.series, facet=a.facet,
                   title=a.title, dpi=a.dpi)
    except PlotError as e:
        print("tide.plot: %s" % e, file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
