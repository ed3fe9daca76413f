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
    assert bounds[0.8] == {"no offload": pytest.approx(321.0)}
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
