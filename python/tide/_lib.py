"""Finding libtide and declaring its C API (tide/engine.h) for ctypes.

libtide is searched, first match wins:
  1. TIDE_LIBRARY: the path of libtide.so (or of the folder holding it);
  2. the build folders recorded when the package was installed
     (TIDE_BUILD_DIR at `pip install` time, else <checkout>/build): their
     lib/libtide.so;
  3. the `tide` command on PATH: <bin>/../lib/libtide.so.0 (an install) or
     <dir>/lib/libtide.so (a build folder);
  4. the dynamic loader's own search (ldconfig, LD_LIBRARY_PATH), then
     /usr/local/lib.
Plugins: libtide searches next to itself (<libdir>/tide/plugins) and
TIDE_PLUGIN_PATH; for a build folder this module adds <build>/plugins.
"""
import ctypes
import ctypes.util
import os
import shutil
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char_p, c_double, c_float, c_int,
                    c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p)

ENGINE_API_VERSION = 2

# enum tide_status
STATUS = {
    0: "TIDE_OK", -1: "TIDE_E_INVAL", -2: "TIDE_E_NOMEM", -3: "TIDE_E_IO", -4: "TIDE_E_FORMAT",
    -5: "TIDE_E_NOTFOUND", -6: "TIDE_E_ABI", -7: "TIDE_E_UNSUPPORTED", -8: "TIDE_E_DEVICE",
    -9: "TIDE_E_BUDGET", -10: "TIDE_E_INTERRUPTED", -11: "TIDE_E_CONFIG", -12: "TIDE_E_RANGE",
    -13: "TIDE_E_CANCELLED",
}
OK, E_CANCELLED = 0, -13


class EngineArgs(Structure):
    _fields_ = [("size", c_uint32), ("config_path", c_char_p), ("config_text", c_char_p),
                ("sets", POINTER(c_char_p)), ("n_sets", c_int), ("plugin_path", c_char_p)]


class StartEvent(Structure):
    _fields_ = [("size", c_uint32), ("prompt_tokens", c_int64), ("gen_length", c_int64),
                ("block_length", c_int), ("steps", c_int), ("threshold", c_double),
                ("temperature", c_double), ("top_k", c_int), ("top_p", c_double),
                ("seed", c_int64), ("chat", c_bool), ("recompute", c_bool), ("n_blocks", c_int),
                ("decoder", c_char_p), ("decoder_settings", c_char_p), ("max_steps", c_int)]


class StepEvent(Structure):
    _fields_ = [("size", c_uint32), ("block", c_int), ("step", c_int), ("n_blocks", c_int),
                ("committed", c_int), ("remaining", c_int), ("tokens", c_int64),
                ("steps", c_int64), ("step_seconds", c_double), ("seconds", c_double),
                ("edited", c_int), ("edits", c_int64)]


class BlockEvent(Structure):
    _fields_ = [("size", c_uint32), ("block", c_int), ("n_blocks", c_int),
                ("ids", POINTER(c_int32)), ("n_ids", c_int64), ("text", c_void_p),
                ("text_len", c_size_t), ("delta", c_void_p), ("delta_len", c_size_t),
                ("steps", c_int64), ("seconds", c_double)]


class LogitsEvent(Structure):
    _fields_ = [("size", c_uint32), ("block", c_int64), ("step", c_int),
                ("logits", POINTER(c_float)), ("rows", c_int), ("vocab", c_int)]


class RowsEvent(Structure):
    _fields_ = [("size", c_uint32), ("block", c_int64), ("step", c_int), ("n", c_int),
                ("pos", POINTER(c_int32)), ("rows", POINTER(POINTER(c_float))), ("vocab", c_int)]


ON_START = CFUNCTYPE(c_int, c_void_p, POINTER(StartEvent))
ON_STEP = CFUNCTYPE(c_int, c_void_p, POINTER(StepEvent))
ON_BLOCK = CFUNCTYPE(c_int, c_void_p, POINTER(BlockEvent))
ON_LOGITS = CFUNCTYPE(None, c_void_p, POINTER(LogitsEvent))
ON_ROWS = CFUNCTYPE(None, c_void_p, POINTER(RowsEvent))


class Request(Structure):
    _fields_ = [("size", c_uint32), ("prompt", c_char_p), ("prompt_ids", POINTER(c_int32)),
                ("n_prompt_ids", c_size_t), ("chat", c_int), ("gen_length", c_int64),
                ("block_length", c_int), ("steps", c_int), ("threshold", c_double),
                ("temperature", c_double), ("top_k", c_int), ("top_p", c_double),
                ("seed", c_int64), ("sets", POINTER(c_char_p)), ("n_sets", c_int),
                ("user", c_void_p), ("on_start", ON_START), ("on_step", ON_STEP),
                ("on_block", ON_BLOCK), ("on_logits", ON_LOGITS), ("on_rows", ON_ROWS)]


class OffloadStats(Structure):
    _fields_ = [("size", c_uint32), ("tokens", c_uint64), ("active", c_uint64),
                ("hit_rows", c_uint64), ("miss_rows", c_uint64), ("promotions", c_uint64),
                ("evictions", c_uint64), ("weight_bytes", c_uint64), ("act_bytes", c_uint64),
                ("hit_rate", c_double), ("host_seconds", c_double), ("device_seconds", c_double)]


class Result(Structure):
    _fields_ = [("size", c_uint32), ("ids", POINTER(c_int32)), ("n_ids", c_int64),
                ("text", c_void_p), ("text_len", c_size_t), ("prompt_tokens", c_int64),
                ("steps", c_int64), ("forwards", c_int64), ("blocks", c_int),
                ("stopped", c_bool), ("cancelled", c_bool), ("seconds", c_double),
                ("prefill_seconds", c_double), ("unknown_ids", c_int64),
                ("offload", OffloadStats), ("gen_length", c_int64), ("block_length", c_int),
                ("steps_per_block", c_int), ("threshold", c_double), ("temperature", c_double),
                ("top_k", c_int), ("top_p", c_double), ("seed", c_int64), ("chat", c_bool),
                ("edits", c_int64), ("model_forwards", c_int64),
                # API version 5: DIP and attention cost (docs/dip.md)
                ("context_tokens", c_int64), ("inserted_tokens", c_int64),
                ("attended", c_int64), ("computed", c_int64)]


class EngineInfo(Structure):
    _fields_ = [("size", c_uint32), ("model", c_char_p), ("model_plugin", c_char_p),
                ("device", c_char_p), ("host", c_char_p), ("policy", c_char_p),
                ("budget", c_int), ("n_layers", c_int), ("n_moe_layers", c_int),
                ("n_experts", c_int), ("experts_per_token", c_int), ("vocab_size", c_int),
                ("max_ctx", c_int64), ("block_length", c_int), ("has_chat_template", c_bool),
                ("expert_bytes", c_uint64),
                # API version 4
                ("decoder", c_char_p), ("gen_multiple", c_int), ("steps_scope", c_int),
                ("nominal_steps", c_int), ("eos_id", c_int32), ("n_end_ids", c_int),
                ("end_ids", POINTER(c_int32)), ("eos_token", c_char_p),
                ("chat_template", c_char_p), ("turn_end", c_char_p)]


def _recorded_build_dirs():
    try:
        from . import _install_paths
        return list(_install_paths.BUILD_DIRS)
    except ImportError:
        return []


def _candidates():
    """(path, why) pairs in search order; a path may not exist."""
    out = []
    env = os.environ.get("TIDE_LIBRARY")
    if env:
        if os.path.isdir(env):
            out += [(os.path.join(env, n), "TIDE_LIBRARY")
                    for n in ("libtide.so", "libtide.so.0")]
        else:
            out.append((env, "TIDE_LIBRARY"))
        return out  # an explicit choice is the only one
    for d in _recorded_build_dirs():
        out.append((os.path.join(d, "lib", "libtide.so"), "build folder recorded at install"))
    exe = shutil.which("tide")
    if exe:
        bindir = os.path.dirname(os.path.realpath(exe))
        out.append((os.path.join(bindir, "..", "lib", "libtide.so.0"), "next to `tide` on PATH"))
        out.append((os.path.join(bindir, "lib", "libtide.so"), "build folder of `tide` on PATH"))
    found = ctypes.util.find_library("tide")
    if found:
        out.append((found, "the dynamic loader"))
    out.append(("/usr/local/lib/libtide.so.0", "the default install prefix"))
    return out


def find_library():
    """The path of the libtide that `import tide` uses (see the module doc)."""
    tried = []
    for path, why in _candidates():
        if os.path.sep not in path:  # a soname: let the loader find it
            return path
        if os.path.isfile(path):
            return os.path.realpath(path)
        tried.append("%s (%s)" % (path, why))
    raise OSError("libtide not found; tried:\n  " + "\n  ".join(tried) +
                  "\nBuild tide (scripts/test.sh or cmake --build build) and set TIDE_LIBRARY to "
                  "build/lib/libtide.so, or install it (cmake --install build).")


def build_plugin_dir(libpath):
    """<build>/plugins when libpath is in a CMake build folder (<build>/lib), else None."""
    libdir = os.path.dirname(os.path.realpath(libpath))
    build = os.path.dirname(libdir)
    plugins = os.path.join(build, "plugins")
    if os.path.isfile(os.path.join(build, "CMakeCache.txt")) and os.path.isdir(plugins):
        return plugins
    return None


def find_executable(libpath):
    """The `tide` command that goes with libpath: TIDE_EXECUTABLE, next to the
    library (build folder or install prefix), else PATH."""
    env = os.environ.get("TIDE_EXECUTABLE")
    if env:
        return env
    libdir = os.path.dirname(os.path.realpath(libpath))
    for cand in (os.path.join(os.path.dirname(libdir), "tide"),
                 os.path.join(os.path.dirname(libdir), "bin", "tide")):
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    exe = shutil.which("tide")
    if exe:
        return exe
    raise OSError("the `tide` command was not found next to %s nor on PATH; set "
                  "TIDE_EXECUTABLE" % libpath)


_lib = None
_path = None


def load():
    """Load libtide once and declare its functions."""
    global _lib, _path
    if _lib is not None:
        return _lib
    path = find_library()
    lib = ctypes.CDLL(path)
    sig = {
        "tide_engine_open": (c_int, [POINTER(EngineArgs), POINTER(c_void_p)]),
        "tide_engine_close": (None, [c_void_p]),
        "tide_engine_error": (c_char_p, [c_void_p]),
        "tide_request_init": (None, [POINTER(Request)]),
        "tide_engine_generate": (c_int, [c_void_p, POINTER(Request), POINTER(POINTER(Result))]),
        "tide_result_free": (None, [POINTER(Result)]),
        "tide_engine_cancel": (None, [c_void_p]),
        "tide_engine_stats": (c_int, [c_void_p, POINTER(OffloadStats)]),
        "tide_engine_layer_stats": (c_int, [c_void_p, c_int, POINTER(OffloadStats)]),
        "tide_engine_reset_stats": (None, [c_void_p]),
        "tide_engine_get_info": (c_int, [c_void_p, POINTER(EngineInfo)]),
        "tide_engine_get_option": (c_int, [c_void_p, c_char_p, POINTER(c_char_p)]),
        "tide_engine_set_options": (c_int, [c_void_p, POINTER(c_char_p), c_int]),
        "tide_engine_tokenize": (c_int, [c_void_p, c_char_p, c_size_t, c_int,
                                         POINTER(POINTER(c_int32)), POINTER(c_size_t)]),
        "tide_engine_detokenize": (c_int, [c_void_p, POINTER(c_int32), c_size_t,
                                           POINTER(c_void_p), POINTER(c_size_t)]),
        "tide_free": (None, [c_void_p]),
        "tide_version": (c_char_p, []),
        "tide_engine_api_version": (c_int, []),
        "tide_status_str": (c_char_p, [c_int]),
        "tide_log_set_level": (None, [c_int]),
        "tide_log_get_level": (c_int, []),
    }
    for name, (res, args) in sig.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise OSError("%s has no %s: it is older than this package (engine API %d)" %
                          (path, name, ENGINE_API_VERSION)) from None
        fn.restype = res
        fn.argtypes = args
    if lib.tide_engine_api_version() < ENGINE_API_VERSION:
        raise OSError("%s serves engine API %d; this package needs %d" %
                      (path, lib.tide_engine_api_version(), ENGINE_API_VERSION))
    _lib, _path = lib, path
    return lib


def library_path():
    load()
    return _path
