#!/usr/bin/env python3
"""The policy study's batch axis (bench/policy-study/run.sh, step 5).

Reads OUT/sim-batch/TRACE--PROFILE--bN.csv (`tide sim --batch N --csv`) and
writes OUT/batch.csv, OUT/batch.md and, per trace and profile, an SVG
(OUT/plots/batch--TRACE--PROFILE.svg): modelled tokens per second (every
sequence's tokens over the batch's modelled time) against batch size, at
each budget's best setting of each policy (policy-tide at its best
interval), and that best interval.

Usage: batch_table.py OUT
"""
import csv
import glob
import os
import re
import sys

POLICIES = ["policy-tide", "policy-lru", "policy-cost", "policy-static"]
# Colour-blind-safe (Okabe-Ito), one marker each.
STYLE = {"policy-tide": ("#0072B2", "circle"), "policy-lru": ("#D55E00", "square"),
         "policy-cost": ("#009E73", "triangle"), "policy-static": ("#CC79A7", "diamond")}


def load(out):
    """{(trace, profile): {budget: {batch: {policy: (tok_per_s, interval, hit_rate, GB,
    ms per batched step)}}}}"""
    data = {}
    for path in sorted(glob.glob(os.path.join(out, "sim-batch", "*.csv"))):
        m = re.match(r"(.*)--(.*)--b(\d+)\.csv$", os.path.basename(path))
        if not m:
            continue
        trace, prof, batch = m.group(1), m.group(2), int(m.group(3))
        for r in csv.DictReader(open(path)):
            if r["policy"] not in POLICIES or not r["model_tok_per_s"]:
                continue
            budget = int(r["budget"])
            tps = float(r["model_tok_per_s"])
            cell = data.setdefault((trace, prof), {}).setdefault(budget, {}).setdefault(batch, {})
            if r["policy"] not in cell or tps > cell[r["policy"]][0]:
                gb = (int(r["weight_bytes"]) + int(r["act_bytes"])) / 1e9
                cell[r["policy"]] = (tps, r["interval"], float(r["hit_rate"]), gb,
                                     float(r["model_ms_per_step"]))
    return data


def svg_plot(path, title, series, xs):
    """Lines of modelled tokens/s against batch size (log2 x axis), one per policy."""
    W, H, L, R, T, B = 560, 360, 70, 150, 40, 50
    ys = [y for s in series.values() for _, y in s]
    if not ys:
        return
    lo, hi = 0.0, max(ys) * 1.08
    lx = [x.bit_length() - 1 for x in xs]
    x0, x1 = min(lx), max(lx) if max(lx) > min(lx) else min(lx) + 1

    def px(x):
        return L + (W - L - R) * ((x.bit_length() - 1) - x0) / (x1 - x0)

    def py(y):
        return H - B - (H - T - B) * (y - lo) / (hi - lo)

    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
         'font-family="sans-serif" font-size="12">' % (W, H),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="20" font-size="14">%s</text>' % (L, title),
         '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - R, H - B),
         '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, T, L, H - B),
         '<text x="%d" y="%d" text-anchor="middle">batch size (sequences per forward)</text>'
         % ((L + W - R) / 2, H - 12),
         '<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">'
         'modelled tokens per second</text>' % ((T + H - B) / 2, (T + H - B) / 2)]
    for x in xs:
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (px(x), H - B + 16, x))
    for k in range(6):
        y = lo + (hi - lo) * k / 5
        label = "%.0f" % y if hi >= 100 else "%.3g" % y
        o.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (L - 6, py(y) + 4, label))
        o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>'
                 % (L, py(y), W - R, py(y)))
    for i, (pol, pts) in enumerate(series.items()):
        colour, marker = STYLE[pol]
        o.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                 % (colour, " ".join("%.1f,%.1f" % (px(x), py(y)) for x, y in pts)))
        for x, y in pts:
            cx, cy = px(x), py(y)
            if marker == "circle":
                o.append('<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>' % (cx, cy, colour))
            elif marker == "square":
                o.append('<rect x="%.1f" y="%.1f" width="8" height="8" fill="%s"/>'
                         % (cx - 4, cy - 4, colour))
            elif marker == "triangle":
                o.append('<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="%s"/>'
                         % (cx, cy - 5, cx - 5, cy + 4, cx + 5, cy + 4, colour))
            else:
                o.append('<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="%s"/>'
                         % (cx, cy - 5, cx + 5, cy, cx, cy + 5, cx - 5, cy, colour))
        ly = T + 10 + 20 * i
        o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>'
                 % (W - R + 10, ly, W - R + 30, ly, colour))
        o.append('<text x="%d" y="%d">%s</text>' % (W - R + 36, ly + 4, pol.replace("policy-", "")))
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def main():
    out = sys.argv[1]
    data = load(out)
    rows = []
    for (trace, prof), by_budget in sorted(data.items()):
        for budget, by_batch in sorted(by_budget.items()):
            for batch, cell in sorted(by_batch.items()):
                if "policy-tide" not in cell:
                    continue
                row = {"trace": trace, "profile": prof, "budget": budget, "batch": batch,
                       "tide_interval": cell["policy-tide"][1]}
                for p in POLICIES:
                    row[p + "_tok_s"] = cell[p][0] if p in cell else float("nan")
                    row[p + "_ms_step"] = cell[p][4] if p in cell else float("nan")
                    row[p + "_hit"] = cell[p][2] if p in cell else float("nan")
                    row[p + "_gb"] = cell[p][3] if p in cell else float("nan")
                row["best"] = max((p for p in POLICIES if p in cell), key=lambda p: cell[p][0])
                rows.append(row)
        budgets = sorted(by_budget)
        if budgets:
            b = budgets[len(budgets) // 2]  # a quarter of the experts
            xs = sorted(by_budget[b])
            series = {p: [(x, by_budget[b][x][p][0]) for x in xs if p in by_budget[b][x]]
                      for p in POLICIES}
            svg_plot(os.path.join(out, "plots", "batch--%s--%s.svg" % (trace, prof)),
                     "%s on %s, budget %d" % (trace, prof, b), series, xs)
    if not rows:
        print("batch: no results in %s/sim-batch" % out)
        return
    fields = list(rows[0].keys())
    with open(os.path.join(out, "batch.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(out, "batch.md"), "w") as f:
        f.write("Modelled tokens/s (every sequence's tokens over the batch's modelled time; "
                "higher is better) at each policy's best setting, hit rate in brackets, "
                "policy-tide's best interval; **best** per row.\n\n")
        f.write("| trace | profile | budget | batch | " +
                " | ".join(p.replace("policy-", "") for p in POLICIES) + " | tide interval |\n")
        f.write("|---" * (5 + len(POLICIES)) + "|\n")
        for r in rows:
            cells = []
            for p in POLICIES:
                v = "%.1f (%.0f%%)" % (r[p + "_tok_s"], 100 * r[p + "_hit"])
                cells.append("**%s**" % v if p == r["best"] else v)
            f.write("| %s | %s | %d | %d | %s | %s |\n" % (
                r["trace"], r["profile"].split("-")[0], r["budget"], r["batch"],
                " | ".join(cells), r["tide_interval"]))
    wins = sum(r["best"] == "policy-tide" for r in rows)
    print("batch: %d rows in %s/batch.md and batch.csv; policy-tide is best in %d of them"
          % (len(rows), out, wins))


if __name__ == "__main__":
    main()
