"""TIDE from Python: drive the runtime through libtide's C API (ctypes, no
compiled extension), run `tide sim` / `tide bench` and read their results.

    import tide
    eng = tide.Engine("config/llada2-tiny.ini", policy={"budget": 4})
    r = eng.generate("Hello", max_tokens=32)
    print(r.text, r.steps, r.offload.hit_rate)
    for chunk in eng.generate("Hello", stream=True):
        print(chunk.text, end="", flush=True)
    print(eng.stats())

    rows = tide.sim("run.tidetrace", policies=["tide", "lru"], budgets=[4, 8])

Figures (PDF, PNG, SVG; needs matplotlib): python -m tide.plot RESULTS.csv
(tide/plot.py).

How libtide is found: tide._lib (TIDE_LIBRARY first); docs/sdk.md.
"""
from ._lib import find_library
from .engine import (Chunk, Cancelled, Engine, OffloadStats, Result, Stream, TideError,
                     set_log_level, version)
from .results import (BenchResults, CommandError, SimResults, bench, executable, read_csv,
                      read_manifest, read_results, sim)

__version__ = "0.1.0"
__all__ = [
    "Engine", "Result", "Chunk", "Stream", "OffloadStats", "TideError", "Cancelled",
    "set_log_level", "version", "find_library", "executable",
    "sim", "bench", "read_results", "read_csv", "read_manifest",
    "SimResults", "BenchResults", "CommandError",
]
