"""tide.Engine against the tiny model: the same tokens as `tide run`,
streaming, per-request parameters, errors, cancellation, counters, offload."""
import os
import signal
import subprocess
import sys
import time

import pytest

import tide
from tide import _lib


def run_cli(config, *args):
    r = subprocess.run([tide.executable(), "--quiet", "run", "-c", config] + list(args),
                       capture_output=True, text=True, errors="replace")
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_library_and_version():
    assert os.path.isfile(tide.find_library())
    assert tide.version() == tide.__version__
    assert os.access(tide.executable(), os.X_OK)


def test_layouts_match_the_library(engine, prompt_ids):
    # The library reports the size of every struct it fills or initialises:
    # the ctypes mirrors of tide/engine.h must agree. Big buffers, so a
    # mismatch is reported rather than overflowing.
    import ctypes
    lib, h = engine._lib, engine._h

    def filled(fn, *args):
        buf = ctypes.create_string_buffer(4096)
        ctypes.c_uint32.from_buffer(buf).value = 4096
        assert fn(*args, ctypes.cast(buf, ctypes.c_void_p)) in (0, None)
        return ctypes.c_uint32.from_buffer(buf).value, buf

    lib.tide_engine_get_info.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.tide_engine_stats.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.tide_request_init.argtypes = [ctypes.c_void_p]
    try:
        assert filled(lib.tide_engine_get_info, h)[0] == ctypes.sizeof(_lib.EngineInfo)
        assert filled(lib.tide_engine_stats, h)[0] == ctypes.sizeof(_lib.OffloadStats)
        assert filled(lib.tide_request_init)[0] == ctypes.sizeof(_lib.Request)
    finally:
        lib.tide_engine_get_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(_lib.EngineInfo)]
        lib.tide_engine_stats.argtypes = [ctypes.c_void_p, ctypes.POINTER(_lib.OffloadStats)]
        lib.tide_request_init.argtypes = [ctypes.POINTER(_lib.Request)]
    sizes = {}

    def keep(name):
        def cb(user, ev):
            sizes[name] = ev.contents.size
            return 0
        return cb

    req = _lib.Request()
    lib.tide_request_init(ctypes.byref(req))
    ids = (ctypes.c_int32 * 40)(*prompt_ids)
    req.prompt_ids, req.n_prompt_ids, req.gen_length = ids, 40, 8
    req.on_start = _lib.ON_START(keep("start"))
    req.on_step = _lib.ON_STEP(keep("step"))
    req.on_block = _lib.ON_BLOCK(keep("block"))
    req.on_logits = _lib.ON_LOGITS(lambda u, ev: sizes.__setitem__("logits", ev.contents.size))
    req.on_rows = _lib.ON_ROWS(lambda u, ev: sizes.__setitem__("rows", ev.contents.size))
    out = ctypes.POINTER(_lib.Result)()
    assert lib.tide_engine_generate(h, ctypes.byref(req), ctypes.byref(out)) == 0
    sizes["result"] = out.contents.size
    lib.tide_result_free(out)
    assert sizes == {"start": ctypes.sizeof(_lib.StartEvent), "step": ctypes.sizeof(_lib.StepEvent),
                     "block": ctypes.sizeof(_lib.BlockEvent),
                     "logits": ctypes.sizeof(_lib.LogitsEvent),
                     "rows": ctypes.sizeof(_lib.RowsEvent),
                     "result": ctypes.sizeof(_lib.Result)}


def test_same_tokens_as_the_cli(engine, config, prompt_ids):
    r = engine.generate(prompt_ids)
    ids = ",".join(str(i) for i in prompt_ids)
    cli = run_cli(config, "--ids", ids, "--print-ids").strip()
    assert r.ids == [int(x) for x in cli.split(",")]
    assert r.prompt_tokens == 40
    assert r.generated_tokens == len(r.ids)
    assert r.forwards > r.steps > 0
    assert r.blocks == 3
    # A text prompt, with and without the chat template.
    for chat in (False, True):
        r = engine.generate("Hello tides", chat=chat)
        cli = run_cli(config, "-p", "Hello tides", "--print-ids", *(["--chat"] if chat else []))
        assert r.ids == [int(x) for x in cli.strip().split(",")]
        assert r.params["chat"] is chat
        assert r.prompt_tokens == len(engine.tokenize("Hello tides", chat=chat))


def test_stream(engine, prompt_ids):
    stream = engine.generate(prompt_ids, stream=True)
    chunks = list(stream)
    assert stream.result is not None
    assert "".join(c.text for c in chunks) == stream.result.text
    assert [c.block for c in chunks][:stream.result.blocks] == list(range(stream.result.blocks))
    assert chunks[-1].ids == stream.result.ids[:len(chunks[-1].ids)]
    again = engine.generate(prompt_ids)
    assert again.ids == stream.result.ids


def test_leaving_a_stream_cancels_it(engine, prompt_ids):
    stream = engine.generate(prompt_ids, stream=True, max_tokens=400)
    for chunk in stream:
        assert chunk.block == 0
        break
    assert stream.result is None
    # The engine is free again, and works.
    assert engine.generate(prompt_ids, max_tokens=8).ids


def test_request_parameters(engine, prompt_ids):
    r = engine.generate(prompt_ids, max_tokens=20, steps=4, threshold=0.9, seed=3)
    assert r.params["gen_length"] == 20 and r.params["steps"] == 4
    assert r.params["threshold"] == 0.9 and r.params["seed"] == 3
    assert r.blocks == 1 and r.steps <= 4
    r = engine.generate(prompt_ids, max_tokens=8, options={"recompute": True})
    assert r.ids
    # The engine's own configuration is unchanged.
    assert engine.option("generation.gen_length") == "64"
    with pytest.raises(tide.TideError) as e:
        engine.generate(prompt_ids, threshold=1.5)
    assert e.value.status_name == "TIDE_E_CONFIG"
    assert "[generation] threshold = '1.5'" in e.value.message
    with pytest.raises(tide.TideError) as e:
        engine.generate(prompt_ids, options={"stepz": 3})
    assert "did you mean 'steps'?" in e.value.message
    with pytest.raises(tide.TideError) as e:
        engine.generate(prompt_ids, block_length=16)
    assert e.value.status_name == "TIDE_E_UNSUPPORTED"
    with pytest.raises(tide.TideError) as e:
        engine.generate("")
    assert e.value.status_name == "TIDE_E_RANGE" and "the prompt is empty" in e.value.message
    with pytest.raises(tide.TideError) as e:
        engine.generate(prompt_ids, max_tokens=10 ** 6)
    assert "context" in e.value.message
    with pytest.raises(ValueError):
        engine.generate(prompt_ids, max_tokens=8, gen_length=9)
    with pytest.raises(ValueError):
        engine.generate(prompt_ids, temperature=-1)


def test_sampling_is_seeded(engine, prompt_ids):
    a = engine.generate(prompt_ids, max_tokens=32, temperature=0.8, top_k=20, seed=5)
    b = engine.generate(prompt_ids, max_tokens=32, temperature=0.8, top_k=20, seed=5)
    c = engine.generate(prompt_ids, max_tokens=32, temperature=0.8, top_k=20, seed=6)
    assert a.ids == b.ids
    assert a.ids != c.ids


def test_callbacks_and_cancel(engine, prompt_ids):
    steps = []
    shapes = []
    r = engine.generate(prompt_ids, max_tokens=32, on_step=steps.append,
                        on_logits=lambda b, s, a: shapes.append(getattr(a, "shape", None)))
    assert len(steps) == r.steps == len(shapes)
    assert steps[-1]["tokens"] >= r.generated_tokens
    if shapes[0] is not None:  # numpy
        assert shapes[0] == (32, engine.info["vocab_size"])
    with pytest.raises(tide.Cancelled) as e:
        engine.generate(prompt_ids, on_step=lambda ev: ev["steps"] == 2)
    assert e.value.result.cancelled and e.value.result.steps == 2
    # An exception in a callback stops the generation and comes back out.
    def boom(ev):
        raise KeyError("from the callback")
    with pytest.raises(KeyError):
        engine.generate(prompt_ids, on_step=boom)
    assert engine.generate(prompt_ids, max_tokens=8).ids


def test_errors_name_the_fault(config):
    with pytest.raises(tide.TideError) as e:
        tide.Engine(text="[generation]\nstepz = 3\n")
    assert e.value.status_name == "TIDE_E_CONFIG"
    assert "<config text>:2: unknown key 'stepz' in [generation]" in e.value.message
    with pytest.raises(tide.TideError) as e:
        tide.Engine(config, policy={"plugin": "policy-frob", "budget": 4})
    assert "policy-frob" in e.value.message
    with pytest.raises(tide.TideError) as e:
        tide.Engine("/nonexistent/x.ini")
    assert "/nonexistent/x.ini" in e.value.message
    with pytest.raises(TypeError):
        tide.Engine(config, budget=4)


def test_offload_is_lossless(config, engine, prompt_ids):
    want = engine.generate(prompt_ids)
    with tide.Engine(config, policy={"plugin": "policy-lru", "budget": 4}) as eng:
        assert eng.info["policy"] == "policy-lru" and eng.info["budget"] == 4
        r = eng.generate(prompt_ids)
        assert r.ids == want.ids
        assert 0 < r.offload.hit_rate < 1
        assert r.offload.promotions > 0 and r.offload.miss_rows > 0
        assert r.offload.weight_bytes == r.offload.promotions * eng.info["expert_bytes"]
        assert r.offload.gb_moved > 0
        r2 = eng.generate(prompt_ids, max_tokens=8)
        total = eng.stats()
        assert total.promotions == r.offload.promotions + r2.offload.promotions
        assert total.tokens == r.offload.tokens + r2.offload.tokens
        layers = [eng.stats(layer=l) for l in range(eng.info["n_moe_layers"])]
        assert sum(l.miss_rows for l in layers) == total.miss_rows
        assert all(0 <= l.hit_rate < 1 for l in layers)
        with pytest.raises(tide.TideError):
            eng.stats(layer=eng.info["n_moe_layers"])
        eng.reset_stats()
        assert eng.stats().tokens == 0
        # Another policy and budget on the open engine: placed again, same tokens.
        eng.set_options(policy={"plugin": "policy-tide", "budget": 8},
                        **{"policy-tide": {"interval": 2}})
        assert eng.info["policy"] == "policy-tide" and eng.info["budget"] == 8
        assert eng.generate(prompt_ids).ids == want.ids
        with pytest.raises(tide.TideError) as e:
            eng.set_options("model.path=/elsewhere")
        assert "cannot change on an open engine" in e.value.message


def test_tokens(engine):
    ids = engine.tokenize("Hello world, hello tides")
    assert ids and engine.detokenize(ids) == "Hello world, hello tides"
    assert len(engine.tokenize("Hi", chat=True)) > len(engine.tokenize("Hi"))


def test_closed_engine(config):
    eng = tide.Engine(config)
    eng.close()
    eng.close()
    with pytest.raises(ValueError):
        eng.generate("Hello")


def test_missing_library_is_explained():
    env = dict(os.environ, TIDE_LIBRARY="/nonexistent/libtide.so")
    r = subprocess.run([sys.executable, "-c", "import tide; tide.Engine()"],
                       capture_output=True, text=True, env=env)
    assert r.returncode != 0
    assert "libtide not found" in r.stderr and "TIDE_LIBRARY" in r.stderr


def test_ctrl_c_stops_a_generation(config):
    # A long generation in a child; SIGINT once it is decoding.
    code = ("import sys, tide\n"
            "e = tide.Engine(%r, log_level='warn')\n"
            "def step(ev):\n"
            "    if ev['steps'] == 1: print('decoding', flush=True)\n"
            "try:\n"
            "    e.generate([5, 6, 7], max_tokens=3000, on_step=step)\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted', flush=True)\n"
            "    e.generate([5, 6, 7], max_tokens=8)\n"
            "    print('usable', flush=True)\n" % config)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "decoding"
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0
    assert out.split() == ["interrupted", "usable"]
    print("stopped %.2f s after SIGINT" % (time.monotonic() - t0))
