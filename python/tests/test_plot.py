"""python -m tide.plot: figures from results in the tide bench schema (a CSV
written here, with repeats and a swept key) and tide sim's; valid PDF, PNG
and SVG; clear errors for a missing column or format."""
import csv
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tide import plot as tplot

pytest.importorskip("matplotlib")

HEADER = ("policy,interval,budget,tokens,steps,seconds,hit_rate,hit_rows,miss_rows,promotions,"
          "evictions,weight_bytes,act_bytes,host_seconds,device_seconds,tokens_per_second,"
          "same_tokens,batch,repeat,generation.threshold").split(",")


def _bench_csv(path):
    """tide bench's schema: a baseline and two policies over budgets 4, 8, 16,
    three repeats, two thresholds (a --sweep column), policy-tide at two
    intervals."""
    rows = []
    for thr in (0.8, 0.95):
        for rep in range(3):
            rows.append(["(no offload)", "-", 32, 64, 70, 0.2, 1.0] + [0] * 8 +
                        [320.0 + rep, "yes", 1, rep, thr])
        for pol, ivs in (("policy-tide", (1, 4)), ("policy-lru", ("-",))):
            for b in (4, 8, 16):
                for iv in ivs:
                    for rep in range(3):
                        tps = 100.0 + 10 * b + (5 if iv == 4 else 0) + 3 * rep + 20 * thr
                        rows.append([pol, iv, b, 64, 70, 64 / tps, 0.5 + b / 40] + [0] * 8 +
                                    [tps, "yes", 1, rep, thr])
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows(rows)
    return str(path)


@pytest.fixture
def bench_csv(tmp_path):
    return _bench_csv(tmp_path / "results.csv")


@pytest.mark.parametrize("ext", [".pdf", ".png", ".svg"])
def test_formats(bench_csv, tmp_path, ext):
    out = str(tmp_path / ("fig" + ext))
    assert tplot.main([bench_csv, "-o", out, "--facet", "generation.threshold"]) == 0
    with open(out, "rb") as f:
        data = f.read()
    assert len(data) > 1000
    if ext == ".pdf":
        assert data.startswith(b"%PDF-") and b"%%EOF" in data[-64:]
    elif ext == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    else:
        assert ET.fromstring(data).tag.endswith("svg")


def test_repeats_become_median_and_spread(bench_csv):
    rows = tplot.read_csv(bench_csv)
    data, bounds = tplot.aggregate(rows, list(rows[0]), "budget", "tokens_per_second", "policy",
                                   "generation.threshold")
    # policy-tide at budget 8, threshold 0.8: its best interval (4), repeats 0..2.
    base = 100.0 + 80 + 5 + 16
    assert data[0.8]["policy-tide"][8.0] == pytest.approx((base + 3, base, base + 6))
    assert set(data[0.95]) == {"policy-tide", "policy-lru"}
    # The baseline is a bound, per facet, not a policy.
    assert bounds[0.8] == {"no offload": {None: pytest.approx(321.0)}}
    assert tplot.log2_axis([4.0, 8.0, 16.0]) and not tplot.log2_axis([1.0, 3.0, 4.0])
    assert not tplot.log2_axis([8.0])


def test_series_and_x_by_any_column(bench_csv, tmp_path):
    out = str(tmp_path / "thr.png")
    assert tplot.main([bench_csv, "-o", out, "--series", "generation.threshold", "--x",
                       "budget", "--y", "time"]) == 0
    assert os.path.getsize(out) > 1000
    out = str(tmp_path / "iv.svg")
    assert tplot.plot(bench_csv, out, x="interval", y="hit", facet="budget") == out


def test_folder_of_result_folders(bench_csv, tmp_path):
    run = tmp_path / "runs" / "20260101-000000"
    run.mkdir(parents=True)
    _bench_csv(run / "results.csv")
    out = tplot.plot(str(tmp_path / "runs"))
    assert out == str(run / "plot.pdf") and os.path.isfile(out)


def test_sim_csv_hindsight_rows_are_bounds(tmp_path):
    path = tmp_path / "sim.csv"
    head = ("policy,interval,budget,promotions,weight_bytes,act_bytes,hit_rows,miss_rows,"
            "hit_rate,model_ms_per_step,model_tok_per_s,model_us,bound,replay_seconds")
    lines = [head]
    for b in (4, 8, 16, 32):
        for pol, tps in (("policy-tide", 50 + b), ("policy-lru", 40 + b), ("oracle", 200),
                         ("belady", 150)):
            lines.append("%s,-,%d,1,1,1,1,1,0.5,1.0,%g,1,0,0.1" % (pol, b, tps))
    path.write_text("\n".join(lines) + "\n")
    rows = tplot.read_csv(str(path))
    data, bounds = tplot.aggregate(rows, list(rows[0]), "budget", "model_tok_per_s", "policy",
                                   None)
    assert set(data[None]) == {"policy-tide", "policy-lru"}
    assert set(bounds[None]) == {"oracle (bound)", "belady (hindsight)"}
    out = str(tmp_path / "sim.pdf")
    assert tplot.main([str(path), "-o", out]) == 0 and os.path.getsize(out) > 1000


def test_missing_column_is_named(bench_csv, tmp_path, capsys):
    assert tplot.main([bench_csv, "-o", str(tmp_path / "x.pdf"), "--facet", "nosuch.key"]) == 2
    err = capsys.readouterr().err
    assert bench_csv in err and "no column 'nosuch.key' for --facet" in err
    assert "generation.threshold" in err  # the columns there are
    # A CSV that lacks the y column (bench's tokens_per_second cut out).
    short = tmp_path / "short.csv"
    with open(bench_csv) as f, open(short, "w") as g:
        for line in f:
            g.write(",".join(line.rstrip("\n").split(",")[:15]) + "\n")
    with pytest.raises(tplot.PlotError, match="short.csv: no column 'tok_s' for --y"):
        tplot.plot(str(short), str(tmp_path / "y.pdf"))
    with pytest.raises(tplot.PlotError, match="write .pdf, .png or .svg"):
        tplot.plot(bench_csv, str(tmp_path / "fig.jpg"))
    with pytest.raises(tplot.PlotError, match="no such file"):
        tplot.plot(str(tmp_path / "none.csv"))
    assert not os.path.exists(tmp_path / "x.pdf")


def test_module_entry_point(bench_csv, tmp_path):
    out = str(tmp_path / "m.png")
    r = subprocess.run([sys.executable, "-m", "tide.plot", bench_csv, "-o", out],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == out and os.path.isfile(out)
    r = subprocess.run([sys.executable, "-m", "tide.plot", bench_csv, "--x", "nope"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no column 'nope' for --x" in r.stderr


# Issue 38: bounds per x, TrueType fonts, column and page sizes, legends
# inside the figure, a colour x marker pair per series. These check the
# figure plot() drew (caught as it is closed), so they hold for any layout.

def _drawn(monkeypatch, *args, **kw):
    """plot(*args, **kw) and the matplotlib figure it drew."""
    import matplotlib.pyplot as plt
    figs = []
    close = plt.close

    def keep(fig=None):
        figs.append(fig)
        close(fig)

    monkeypatch.setattr(plt, "close", keep)
    tplot.plot(*args, **kw)
    assert len(figs) == 1
    return figs[0]


def _sim_csv(path, n_series=2, long_names=False):
    """A tide sim --csv file over budgets 4..32 whose oracle and belady
    differ per budget, with n_series policies."""
    head = ("policy,interval,budget,promotions,weight_bytes,act_bytes,hit_rows,miss_rows,"
            "hit_rate,model_ms_per_step,model_tok_per_s,model_us,bound,replay_seconds")
    lines = [head]
    pols = ["policy-%s%s" % (chr(97 + i), " with a long name threshold=0.95 batch 4"
                             if long_names else "") for i in range(n_series)]
    for b in (4, 8, 16, 32):
        for i, pol in enumerate(pols):
            lines.append("%s,-,%d,1,1,1,1,1,0.5,1.0,%g,1,0,0.1" % (pol, b, 40 + b + i))
        lines.append("oracle,-,%d,1,1,1,1,1,0.5,1.0,%g,1,0,0.1" % (b, 100 + 10 * b))
        lines.append("belady,-,%d,1,1,1,1,1,0.5,1.0,%g,1,0,0.1" % (b, 90 + 5 * b))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_bounds_per_x(tmp_path, monkeypatch):
    csv_path = _sim_csv(tmp_path / "sim.csv")
    fig = _drawn(monkeypatch, csv_path, str(tmp_path / "b.png"))
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    # The oracle of budget b at b, not its best over all budgets.
    oracle = lines["oracle (bound)"]
    assert [float(v) for v in oracle.get_xdata()] == [4.0, 8.0, 16.0, 32.0]
    assert [float(v) for v in oracle.get_ydata()] == [140.0, 180.0, 260.0, 420.0]
    assert [float(v) for v in lines["belady (hindsight)"].get_ydata()] == [110, 130, 170, 250]
    rows = tplot.read_csv(csv_path)
    _, bounds = tplot.aggregate(rows, list(rows[0]), "budget", "model_tok_per_s", "policy", None)
    assert bounds[None]["oracle (bound)"] == {4.0: 140.0, 8.0: 180.0, 16.0: 260.0, 32.0: 420.0}


def test_baseline_stays_flat(bench_csv, tmp_path, monkeypatch):
    fig = _drawn(monkeypatch, bench_csv, str(tmp_path / "f.png"), facet="generation.threshold")
    base = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "no offload"]
    assert len(base) == 1 and len(set(base[0].get_ydata())) == 1


def test_pdf_fonts_are_truetype(bench_csv, tmp_path):
    out = str(tmp_path / "f.pdf")
    tplot.plot(bench_csv, out)
    data = open(out, "rb").read()
    assert b"/FontType 3" not in data and b"/Subtype /Type3" not in data
    # TrueType glyphs (FontFile2), as a TrueType or CID TrueType font
    # (pdffonts: "TrueType" / "CID TrueType"), never Type 3.
    assert b"/FontFile2" in data
    assert b"/Subtype /TrueType" in data or b"/Subtype /CIDFontType2" in data


def _inside(fig):
    fig.canvas.draw()
    fb = fig.bbox
    for leg in fig.legends:
        bb = leg.get_window_extent()
        assert bb.x0 >= fb.x0 - 0.5 and bb.x1 <= fb.x1 + 0.5, (bb, fb)
        assert bb.y0 >= fb.y0 - 0.5 and bb.y1 <= fb.y1 + 0.5, (bb, fb)
    return fig


@pytest.mark.parametrize("size", [None, "column", "page"])
def test_legend_inside_figure(tmp_path, monkeypatch, size):
    csv_path = _sim_csv(tmp_path / "sim.csv", n_series=6, long_names=True)
    kw = {"size": size} if size else {}
    fig = _inside(_drawn(monkeypatch, csv_path, str(tmp_path / "l.pdf"), **kw))
    assert fig.legends
    if size:
        assert fig.get_figwidth() == pytest.approx(tplot.SIZES[size])


def test_sizes(bench_csv, tmp_path, monkeypatch):
    for size, w in (("column", 3.5), ("page", 7.0)):
        out = str(tmp_path / ("%s.pdf" % size))
        assert tplot.main([bench_csv, "-o", out, "--size", size, "--facet",
                           "generation.threshold"]) == 0
        fig = _drawn(monkeypatch, bench_csv, str(tmp_path / "s.png"), size=size,
                     facet="generation.threshold")
        assert fig.get_figwidth() == pytest.approx(w)
    with pytest.raises(SystemExit):
        tplot.main([bench_csv, "--size", "poster"])


def test_colour_marker_pair_per_series(tmp_path, monkeypatch):
    csv_path = _sim_csv(tmp_path / "sim.csv", n_series=14)
    fig = _drawn(monkeypatch, csv_path, str(tmp_path / "c.png"))
    handles, labels = fig.axes[0].get_legend_handles_labels()
    # errorbar() gives a container: its first artist is the line.
    lines = [h[0] if isinstance(h, tuple) else h for h, lab in zip(handles, labels)
             if lab.startswith("policy-")]
    pairs = [(ln.get_color(), ln.get_marker()) for ln in lines]
    assert len(pairs) == 14 and len(set(pairs)) == 14
