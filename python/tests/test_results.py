"""tide.sim and tide.bench through the `tide` command, results as dicts."""
import os
import shutil
import subprocess
import sys

import pytest

import tide


@pytest.fixture(scope="module")
def trace(workdir):
    path = workdir / "synth.tidetrace"
    subprocess.run([tide.executable(), "--quiet", "trace", "synth", str(path), "--preset", "tiny",
                    "--blocks", "2", "--force"], check=True)
    return str(path)


def test_sim_rows(trace):
    rows = tide.sim(trace, policies=["lru", "tide"], budgets=[4, 8], intervals=[1, 4],
                    hindsight=False)
    assert {(r["policy"], r["budget"], r["interval"]) for r in rows} == {
        ("policy-lru", 4, "-"), ("policy-lru", 8, "-"),
        ("policy-tide", 4, 1), ("policy-tide", 4, 4), ("policy-tide", 8, 1), ("policy-tide", 8, 4)}
    for r in rows:
        assert 0 <= r["hit_rate"] <= 1
        assert isinstance(r["promotions"], int)
    # More slots: never a lower hit rate for the same policy.
    lru = {r["budget"]: r["hit_rate"] for r in rows if r["policy"] == "policy-lru"}
    assert lru[8] >= lru[4]
    assert "policy" in rows.stdout


def test_sim_csv_kept_and_read(trace, workdir):
    out = str(workdir / "sim.csv")
    rows = tide.sim(trace, policies="static", budgets="4", csv=out, hindsight=False)
    assert os.path.isfile(out)
    assert tide.read_results(out) == list(rows)


def test_sim_errors_come_back(trace):
    with pytest.raises(tide.CommandError) as e:
        tide.sim(trace, policies=["frob"], budgets=[4])
    assert e.value.returncode == 2 and "frob" in e.value.stderr


def test_bench(config, workdir):
    prompts = workdir / "prompts.txt"
    prompts.write_text("# one prompt\nHello tides\n")
    out = workdir / "bench"
    rows = tide.bench(config, policies=["lru"], budgets=[4], prompts=str(prompts),
                      out=str(out), generation__gen_length=32)
    assert os.path.isdir(rows.folder) and rows.folder.startswith(str(out))
    assert rows.manifest["tide_version"] == tide.version()
    assert [r["policy"] for r in rows][-1] == "policy-lru"
    assert all(r["same_tokens"] == "yes" for r in rows)
    assert tide.read_results(rows.folder) == list(rows)
    # Without out: [bench] out of the config, here set by an override.
    rows2 = tide.bench(config, policies=["lru"], budgets=[4], prompts=str(prompts),
                       bench__out=str(workdir / "bench2"), generation__gen_length=32)
    assert rows2.folder.startswith(str(workdir / "bench2"))


def test_pandas_optional(trace):
    pd = pytest.importorskip("pandas")
    df = tide.sim(trace, policies="lru", budgets=[4, 8], hindsight=False, pandas=True)
    assert isinstance(df, pd.DataFrame) and len(df) == 2


def test_readme_one_liner(workdir):
    # The command from the README, in a folder holding config/llada2-tiny.ini,
    # with nothing telling the package where libtide is but its install.
    here = workdir / "readme"
    (here / "config").mkdir(parents=True)
    src = os.environ.get("TIDE_SOURCE_DIR")
    if not src:
        pytest.skip("TIDE_SOURCE_DIR is not set")
    try:
        from tide import _install_paths  # noqa: F401  written by pip install
    except ImportError:
        pytest.skip("the package was not installed with pip (no recorded build folder)")
    shutil.copy(os.path.join(src, "config", "llada2-tiny.ini"), here / "config")
    env = {k: v for k, v in os.environ.items() if k != "TIDE_LIBRARY"}
    r = subprocess.run([sys.executable, "-c", "import tide; print(tide.Engine("
                        "'config/llada2-tiny.ini').generate('Hello').text)"],
                       cwd=str(here), capture_output=True, text=True, errors="replace", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
