"""Paper figures from `tide bench` and `tide sim` results, with matplotlib.

    python -m tide.plot RESULTS.csv [-o OUT.pdf|.png|.svg] [--x budget]
                        [--y tok_s] [--series policy] [--facet KEY]
                        [--size column|page]

RESULTS.csv is a `tide bench` results.csv (or its folder, or a folder of
result folders: the newest), or a `tide sim --csv` file. Rows that share a
configuration (the repeats of `--repeats N`) become one point at their median
with a min..max error bar. Where several configurations share a point (the
intervals of policy-tide against budget), the best by --y is drawn. Any
column can be --x, --series or --facet, including swept keys such as
generation.threshold. The no-offload baseline and tide sim's hindsight rows
(oracle, belady, best-static) are drawn as grey dashed bounds, not as
policies: the baseline as a horizontal line, a hindsight bound at its value
for each x (the oracle of budget 8 at 8). An x axis of powers of two is log2.
Colours are Okabe and Ito's colour-blind-safe palette, each series with its
own colour x marker pair. --size column (3.5 in) or page (7 in) gives a
figure of that width for a two-column paper, its legend below the panels;
the legend is never cut at the figure's edge. PDFs embed TrueType (Type 42)
fonts, not Type 3 ones, which IEEE PDF eXpress rejects.

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
# Figure widths in inches: a column and a page of a two-column paper (IEEE).
SIZES = {"column": 3.5, "page": 7.0}
LOWER_IS_BETTER = ("seconds", "_ms_", "_us", "bytes", "miss", "promotions", "evictions")
BOUNDS = {"(no offload)": "no offload", "oracle": "oracle (bound)",
          "belady": "belady (hindsight)", "best-static": "best-static (hindsight)"}
# Bounds that do not depend on x (the baseline runs every expert on the
# device whatever the budget): one horizontal line.
FLAT_BOUNDS = {"no offload"}


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
    configuration per point; and {facet: {bound name: {x: median}}}, the
    best per x, where x is None for a bound drawn flat (the no-offload
    baseline, or rows without a numeric x)."""
    ident = [c for c in columns if c not in MEASURED and c != y]
    configs: Dict[tuple, List[Dict]] = {}
    for r in rows:
        configs.setdefault(tuple(r.get(c) for c in ident), []).append(r)
    lower = any(k in y for k in LOWER_IS_BETTER)

    def better(a, b):
        return b is None or (a < b if lower else a > b)

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
        xv = _num(r0.get(x))
        if series == "policy" and name in BOUNDS:
            bn = BOUNDS[name]
            bx = None if bn in FLAT_BOUNDS else xv
            per_x = bounds.setdefault(fv, {}).setdefault(bn, {})
            if better(point[0], per_x.get(bx)):
                per_x[bx] = point[0]
            continue
        if xv is None:
            continue
        pts = data.setdefault(fv, {}).setdefault(name, {})
        old = pts.get(xv)
        if better(point[0], old[0] if old else None):
            pts[xv] = point
    # A bound with a value per x and a flat one too (rows without x): the
    # per-x values are the ones that mean something on this axis.
    for per_f in bounds.values():
        for per_x in per_f.values():
            if None in per_x and len(per_x) > 1:
                del per_x[None]
    return data, bounds


def _style(names: Sequence) -> Dict:
    """A distinct (colour, marker) pair for each name, in order."""
    return {n: (PALETTE[i % len(PALETTE)], MARKERS[i % len(MARKERS)]) for i, n in
            enumerate(names)}


def plot(results: str, out: Optional[str] = None, x: str = "budget", y: str = "tok_s",
         series: str = "policy", facet: Optional[str] = None, title: Optional[str] = None,
         dpi: int = 150, size: Optional[str] = None) -> str:
    """Draw results (see the module's doc) into out (.pdf, .png or .svg;
    default: plot.pdf beside the CSV). size: None (as wide as the panels
    and legend need), "column" (3.5 in) or "page" (7 in). Returns the path
    written. Raises PlotError on bad input or a missing matplotlib."""
    path = find_results(results)
    if out is None:
        out = os.path.join(os.path.dirname(path) or ".", "plot.pdf")
    ext = os.path.splitext(out)[1].lower()
    if ext not in (".pdf", ".png", ".svg"):
        raise PlotError("%s: write .pdf, .png or .svg" % out)
    if size is not None and size not in SIZES:
        raise PlotError("--size %s: column (%g in) or page (%g in)" % (size, SIZES["column"],
                                                                      SIZES["page"]))
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
    # TrueType (Type 42) fonts in PDF and PostScript: matplotlib's default,
    # Type 3, is refused by IEEE PDF eXpress and some publishers.
    with plt.rc_context({"pdf.fonttype": 42, "ps.fonttype": 42}):
        fig = _figure(plt, data, bounds, x, y, facet, title, size)
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out


def _figure(plt, data, bounds, x, y, facet, title, size):
    facets = sorted(set(data) | set(bounds), key=lambda v: (str(type(v)), v))
    width = SIZES.get(size)
    # A column holds one panel across: two side by side made their titles
    # and x labels run into each other.
    ncol = min(1 if size == "column" else 3, len(facets))
    nrow = (len(facets) + ncol - 1) // ncol
    # Panel sizes (inches); the legend's room is added once it is measured.
    if width:
        pw = width / ncol
        ph = min(3.0, 0.8 * pw) if ncol > 1 else 0.72 * pw
        fs = {"tick": 7, "label": 8, "title": 8, "legend": 7, "suptitle": 9}
    else:
        pw, ph = 4.0, 3.2
        fs = {"tick": 8, "label": 9, "title": 10, "legend": 8, "suptitle": 11}
    fig, axes = plt.subplots(nrow, ncol, figsize=(pw * ncol, ph * nrow), sharey=True,
                             squeeze=False)
    names = []  # in the order the CSV first shows them, as tide bench plot draws them
    for f in data.values():
        names += [n for n in f if n not in names]
    style = _style(names)
    xs_all = sorted({v for f in data.values() for s in f.values() for v in s})
    log2 = log2_axis(xs_all)
    dashes = [(6, 3), (2, 2), (8, 2, 2, 2)]
    lw = 1.2 if width else 1.6
    for k, fv in enumerate(facets):
        ax = axes[k // ncol][k % ncol]
        for n, pts in data.get(fv, {}).items():
            xv = sorted(pts)
            med = [pts[v][0] for v in xv]
            err = [[pts[v][0] - pts[v][1] for v in xv], [pts[v][2] - pts[v][0] for v in xv]]
            col, mk = style[n]
            has_err = any(e > 0 for e in err[0] + err[1])
            ax.errorbar(xv, med, yerr=err if has_err else None, color=col, marker=mk,
                        markersize=4 if width else 5, linewidth=lw, capsize=2 if width else 3,
                        label=_fmt(n))
        for j, (bn, per_x) in enumerate(sorted(bounds.get(fv, {}).items())):
            kw = dict(color="#666666", linewidth=lw + 0.6, dashes=dashes[j % len(dashes)],
                      label=bn, zorder=1)
            if None in per_x or len(per_x) < 2:
                ax.axhline(next(iter(per_x.values())), **kw)
            else:
                bx = sorted(per_x)
                ax.plot(bx, [per_x[v] for v in bx], **kw)
        if log2:
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs_all)
            ax.set_xticklabels(["%g" % v for v in xs_all])
            ax.minorticks_off()
        if facet:
            ax.set_title("%s = %s" % (facet, _fmt(fv)), fontsize=fs["title"])
        xlabel = LABELS.get(x, x) + (" (log2)" if log2 else "")
        # Panels a third of a page wide are narrower than the label: one
        # label under them all.
        if not (width and ncol > 1):
            ax.set_xlabel(xlabel, fontsize=fs["label"])
        if k % ncol == 0:
            ax.set_ylabel(LABELS.get(y, y), fontsize=fs["label"])
        ax.grid(True, color="#e4e4e4", linewidth=0.8)
        ax.tick_params(labelsize=fs["tick"])
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
    if width and ncol > 1:
        fig.supxlabel(xlabel, fontsize=fs["label"])
    if title:
        fig.suptitle(title, fontsize=fs["suptitle"])
    _legend(fig, [handles[lab] for lab in labels], labels, fs["legend"], width)
    return fig


def _legend(fig, handles, labels, fontsize, width):
    """Place the legend where it is whole: at the right of the panels, the
    figure widened to hold it (width None), or below them in as many
    columns as the fixed width holds, the figure made taller. The panels
    are laid out in what is left (tight_layout ignores figure legends)."""
    renderer = fig.canvas.get_renderer()
    pad = 0.08  # inches between the legend and the figure's edge
    W, H = fig.get_figwidth(), fig.get_figheight()
    if not width:
        leg = fig.legend(handles, labels, loc="center left", fontsize=fontsize, frameon=False)
        bb = leg.get_window_extent(renderer)
        lw, lh = bb.width / fig.dpi, bb.height / fig.dpi
        fig.set_size_inches(W + lw + 2 * pad, max(H, lh + 2 * pad))
        W2, H2 = fig.get_figwidth(), fig.get_figheight()
        leg.set_bbox_to_anchor((W / W2, 0.5), transform=fig.transFigure)
        fig.tight_layout(rect=(0, 0, W / W2, 1))
        return leg
    ncol = max(1, len(labels))
    while True:
        leg = fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=fontsize,
                         frameon=False, columnspacing=1.0, handlelength=2.4)
        bb = leg.get_window_extent(renderer)
        if bb.width / fig.dpi <= W - 2 * pad or ncol == 1:
            break
        leg.remove()
        ncol -= 1
    lh = bb.height / fig.dpi
    # A shared x label (fig.supxlabel) sits between the panels and the legend.
    sup = getattr(fig, "_supxlabel", None)
    sh = sup.get_window_extent(renderer).height / fig.dpi + pad if sup else 0
    fig.set_size_inches(W, H + lh + pad + sh)
    H2 = fig.get_figheight()
    leg.set_bbox_to_anchor((0.5, pad / 2 / H2), transform=fig.transFigure)
    if sup:
        sup.set_y((lh + pad) / H2)
        sup.set_va("bottom")
    fig.tight_layout(rect=(0, (lh + pad + sh) / H2, 1, 1), pad=0.3)
    return leg


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
    p.add_argument("--size", choices=sorted(SIZES), help="a figure as wide as a column (3.5 in) "
                   "or a page (7 in) of a two-column paper, the legend below the panels "
                   "(default: as wide as the panels and the legend need)")
    a = p.parse_args(argv)
    try:
        out = plot(a.results, a.out, x=a.x, y=a.y, series=a.series, facet=a.facet,
                   title=a.title, dpi=a.dpi, size=a.size)
    except PlotError as e:
        print("tide.plot: %s" % e, file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
