"""Running `tide sim` and `tide bench`, and reading their results as lists
of dicts (or pandas DataFrames when asked)."""
import csv
import json
import os
import subprocess
import tempfile
from typing import Dict, List, Optional, Sequence, Union

from . import _lib


class CommandError(RuntimeError):
    """The `tide` command failed: .returncode, .stderr (its messages)."""

    def __init__(self, cmd, returncode, stderr):
        self.cmd, self.returncode, self.stderr = cmd, returncode, stderr
        super().__init__("tide %s exited %d:\n%s" % (" ".join(cmd[1:3]), returncode,
                                                    stderr.strip()[-4000:]))


def executable() -> str:
    """The `tide` command that goes with the libtide this package uses."""
    return _lib.find_executable(_lib.library_path())


def _number(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def read_csv(path: str, pandas: bool = False):
    """A CSV file as a list of dicts, numbers converted; a DataFrame when
    pandas is True (needs pandas)."""
    if pandas:
        import pandas as pd  # optional dependency
        return pd.read_csv(path)
    with open(path, newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def read_manifest(folder: str) -> Dict:
    """manifest.json of a bench results folder."""
    with open(os.path.join(folder, "manifest.json")) as f:
        return json.load(f)


def read_results(path: str, pandas: bool = False):
    """Results of `tide bench` (its folder, or results.csv) or `tide sim
    --csv FILE`, one dict per row (or a DataFrame with pandas=True)."""
    if os.path.isdir(path):
        path = os.path.join(path, "results.csv")
    return read_csv(path, pandas=pandas)


def _list(values) -> Optional[str]:
    if values is None:
        return None
    if isinstance(values, (str, int)):
        return str(values)
    return ",".join(str(v) for v in values)


def _run(args: List[str], tide: Optional[str]) -> subprocess.CompletedProcess:
    cmd = [tide or executable()] + args
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        raise CommandError(cmd, r.returncode, r.stderr)
    return r


def _common(config, sets, overrides):
    from .engine import _sets
    args = []
    if config:
        args += ["-c", str(config)]
    for s in list(sets) + _sets(overrides):
        args += ["--set", s]
    return args


class SimResults(list):
    """Rows of `tide sim` (list of dicts); .stdout is its printed table."""
    stdout = ""


def sim(trace: str, *, policies=None, budgets=None, intervals=None,
        profile: Optional[str] = None, config: Optional[str] = None, sets: Sequence[str] = (),
        model: Optional[str] = None, hindsight: bool = True, oracle: bool = True,
        layer_budgets: bool = False, scale_profile: bool = False, csv: Optional[str] = None,
        pandas: bool = False, extra: Sequence[str] = (), tide: Optional[str] = None,
        **overrides) -> Union[SimResults, "object"]:
    """Replay a routing trace through policies and budgets (`tide sim`,
    docs/sim.md) and return its rows: one dict per configuration (the
    columns of `tide sim --csv`). policies/budgets/intervals are lists or
    "a,b" strings; overrides as for Engine (e.g. policy_tide options through
    sets=['policy-tide.prefetch=true']). csv keeps the CSV at that path."""
    args = ["sim", "--trace", str(trace)]
    for flag, val in (("--policy", _list(policies)), ("--budget", _list(budgets)),
                      ("--interval", _list(intervals)), ("--profile", profile),
                      ("--model", model)):
        if val is not None:
            args += [flag, str(val)]
    args += [f for f, on in (("--no-hindsight", not hindsight), ("--no-oracle", not oracle),
                             ("--layer-budgets", layer_budgets),
                             ("--scale-profile", scale_profile)) if on]
    args += _common(config, sets, overrides) + list(extra)
    with tempfile.TemporaryDirectory(prefix="tide-sim-") as tmp:
        out = csv or os.path.join(tmp, "sim.csv")
        args += ["--csv", out] + (["--force"] if csv else [])
        r = _run(args, tide)
        if pandas:
            return read_csv(out, pandas=True)
        rows = SimResults(read_csv(out))
    rows.stdout = r.stdout
    return rows


def _bench_out(config, common, tide) -> str:
    """[bench] out as the command would resolve it (defaults, file, --set)."""
    if config:
        text = _run(["config", "check"] + [str(config)] + common[2:], tide).stdout
        section = None
        for line in text.splitlines():
            if line.startswith("["):
                section = line.strip()
            elif section == "[bench]" and line.split("=")[0].strip() == "out":
                return line.split("=", 1)[1].rsplit(";", 1)[0].strip()
    out = "bench-results"
    for i, a in enumerate(common):
        if a == "--set" and common[i + 1].startswith("bench.out="):
            out = common[i + 1].split("=", 1)[1]
    return out


class BenchResults(list):
    """Rows of `tide bench` (list of dicts); .folder is the results folder,
    .manifest its manifest.json."""
    folder = ""
    manifest: Dict = {}


def bench(config: Optional[str] = None, *, policies=None, budgets=None, intervals=None,
          prompts: Optional[str] = None, max_prompts: Optional[int] = None,
          repeats: Optional[int] = None, out: Optional[str] = None, sets: Sequence[str] = (),
          pandas: bool = False, extra: Sequence[str] = (), tide: Optional[str] = None,
          **overrides):
    """Run `tide bench` (policies x budgets x intervals on a prompt set, the
    model loaded once) and return its results.csv rows. The results folder
    (a new timestamped one under out, default [bench] out) is kept; its path
    is .folder of the returned list (with pandas=True, a DataFrame with
    attrs['folder'])."""
    args = ["bench"]
    for flag, val in (("--policies", _list(policies)), ("--budgets", _list(budgets)),
                      ("--intervals", _list(intervals)), ("--prompts", prompts),
                      ("--max-prompts", max_prompts), ("--repeats", repeats), ("--out", out)):
        if val is not None:
            args += [flag, str(val)]
    common = _common(config, sets, overrides)
    args += common + list(extra)
    root = out if out is not None else _bench_out(config, common, tide)
    before = set(os.listdir(root)) if os.path.isdir(root) else set()
    _run(args, tide)
    new = sorted(set(os.listdir(root)) - before) if os.path.isdir(root) else []
    if not new:
        raise RuntimeError("tide bench wrote no new results folder under %s" % root)
    folder = os.path.join(root, new[-1])
    if pandas:
        df = read_results(folder, pandas=True)
        df.attrs["folder"] = folder
        return df
    rows = BenchResults(read_results(folder))
    rows.folder = folder
    rows.manifest = read_manifest(folder)
    return rows
