#!/usr/bin/env python3
"""The policy study's format axis (bench/policy-study/run.sh, step 6).

Reads OUT/sim-format/TRACE--PROFILE--FMT.csv (`tide sim --experts FMT
--csv`: the trace's routing replayed with experts of weight format FMT, so
each promotion moves that format's bytes while expert compute keeps the
profile's curves) and writes OUT/format.csv and OUT/format.md: per trace,
profile, budget and format, the oracle bound, TIDE's best interval and its
modelled time over the oracle, the best policy and its time, and the best
policy's speed-up over bf16.

Usage: format_table.py OUT
"""
import csv
import glob
import os
import re
import sys

FORMATS = ["bf16", "fp8", "q8_0", "q4_0"]


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    data = {}
    for path in sorted(glob.glob(os.path.join(out, "sim-format", "*.csv"))):
        m = re.match(r"(.*)--(.*)--(bf16|fp8|q8_0|q4_0)\.csv$", os.path.basename(path))
        if not m:
            continue
        trace, prof, fmt = m.groups()
        for r in csv.DictReader(open(path)):
            if not r["model_us"] or not r["budget"].isdigit():
                continue
            key = (trace, prof, int(r["budget"]))
            cur = data.setdefault(key, {}).setdefault(fmt, {})
            us = float(r["model_us"])
            if r["policy"] not in cur or us < cur[r["policy"]][0]:
                cur[r["policy"]] = (us, r["interval"], float(r["model_ms_per_step"]),
                                    int(r["weight_bytes"] or 0))
    rows = []
    for (trace, prof, budget), by_fmt in sorted(data.items()):
        base = None
        for fmt in FORMATS:
            d = by_fmt.get(fmt)
            if not d or "oracle" not in d or "policy-tide" not in d:
                continue
            pols = {p: v for p, v in d.items() if p.startswith("policy-")}
            best = min(pols, key=lambda p: pols[p][0])
            if fmt == "bf16":
                base = pols[best][0]
            rows.append({
                "trace": trace, "profile": prof, "budget": budget, "format": fmt,
                "oracle_ms": d["oracle"][2],
                "tide_interval": d["policy-tide"][1],
                "tide_ms": d["policy-tide"][2],
                "tide_vs_oracle": d["policy-tide"][0] / d["oracle"][0],
                "tide_gb": d["policy-tide"][3] / 1e9,
                "best_policy": best, "best_ms": pols[best][2],
                "best_vs_bf16": (base / pols[best][0]) if base else float("nan"),
            })
    if not rows:
        print("format_table: no sim-format CSVs in", out)
        return 1
    fields = list(rows[0].keys())
    with open(os.path.join(out, "format.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(out, "format.md"), "w") as f:
        f.write("| trace | profile | budget | format | oracle ms/step | tide best τ | tide ms/step "
                "| tide / oracle | tide GB moved | best policy | its ms/step | speed-up vs bf16 |\n")
        f.write("|---" * 12 + "|\n")
        for r in rows:
            f.write("| %s | %s | %d | %s | %.2f | %s | %.2f | %.3f | %.2f | %s | %.2f | %.2fx |\n"
                    % (r["trace"], r["profile"].split("-")[0], r["budget"], r["format"],
                       r["oracle_ms"], r["tide_interval"], r["tide_ms"], r["tide_vs_oracle"],
                       r["tide_gb"], r["best_policy"].replace("policy-", ""), r["best_ms"],
                       r["best_vs_bf16"]))
    print("format axis: %d rows in %s/format.md and format.csv" % (len(rows), out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
