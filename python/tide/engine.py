"""tide.Engine: a loaded model to generate with, over libtide's C API."""
import ctypes
import queue
import signal
import threading
from ctypes import POINTER, byref, c_char_p, c_int32, c_size_t, c_void_p
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Union

from . import _lib

LOG_LEVELS = {"error": 0, "warn": 1, "info": 2, "debug": 3}


class TideError(Exception):
    """A call into libtide failed. .status is the enum tide_status value,
    .status_name its name (TIDE_E_CONFIG, ...), the message what the runtime
    logged where it failed (the file, key or tensor at fault)."""

    def __init__(self, status: int, message: str):
        self.status = status
        self.status_name = _lib.STATUS.get(status, str(status))
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))


class Cancelled(TideError):
    """The generation was cancelled (Engine.cancel() or a callback)."""


def _raise(lib, engine, status):
    msg = lib.tide_engine_error(engine).decode("utf-8", "replace")
    cls = Cancelled if status == _lib.E_CANCELLED else TideError
    raise cls(status, msg)


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _sets(config: Dict) -> List[str]:
    """Overrides as "section.key=value": {'policy': {'budget': 4}} or
    {'policy__budget': 4} (a double underscore stands for the dot)."""
    out = []
    for k, v in config.items():
        if isinstance(v, dict):
            out += ["%s.%s=%s" % (k, kk, _text(vv)) for kk, vv in v.items()]
        elif "__" in k:
            section, key = k.split("__", 1)
            out.append("%s.%s=%s" % (section, key, _text(v)))
        else:
            raise TypeError("override %r: give section__key=value or section={key: value}" % k)
    return out


def _dip_counters(r) -> Dict[str, int]:
    """The API-version-5 counters of a C result, when the library fills them."""
    names = ("context_tokens", "inserted_tokens", "attended", "computed")
    end = getattr(type(r), "computed").offset + ctypes.sizeof(ctypes.c_int64)
    return {n: getattr(r, n) for n in names} if r.size >= end else {}


def _cstrings(items: Sequence[str]):
    arr = (c_char_p * max(len(items), 1))()
    for i, s in enumerate(items):
        arr[i] = s.encode()
    return arr


@dataclass
class OffloadStats:
    """Exact offload counters (totals over MoE layers and forwards)."""
    tokens: int = 0
    active: int = 0
    hit_rows: int = 0
    miss_rows: int = 0
    promotions: int = 0
    evictions: int = 0
    weight_bytes: int = 0
    act_bytes: int = 0
    hit_rate: float = 0.0
    host_seconds: float = 0.0
    device_seconds: float = 0.0

    @property
    def gb_moved(self) -> float:
        """Weights and activations moved between host and device, GB (1e9 bytes)."""
        return (self.weight_bytes + self.act_bytes) / 1e9

    @classmethod
    def _from(cls, s):
        return cls(**{f: getattr(s, f) for f in cls.__dataclass_fields__})


@dataclass
class Result:
    """What Engine.generate returned: the text and ids generated, the counts
    (an API's `usage`), the effective parameters, this request's offload
    counters."""
    text: str
    ids: List[int]
    prompt_tokens: int
    steps: int
    forwards: int
    blocks: int
    stopped: bool
    cancelled: bool
    seconds: float
    prefill_seconds: float
    unknown_ids: int
    offload: OffloadStats
    params: Dict[str, object] = field(default_factory=dict)
    edits: int = 0  # tokens replaced by other tokens (editing decoders such as llada21)
    model_forwards: int = 0  # forward calls of the model it took part in (shared in a batch)
    context_tokens: int = 0  # the prompt at the start, DIP's up-front examples included
    inserted_tokens: int = 0  # tokens that joined the prompt during generation (DIP)
    attended: int = 0  # key positions attended, summed over the passes
    computed: int = 0  # positions computed, summed over the passes

    @property
    def generated_tokens(self) -> int:
        return len(self.ids)

    @property
    def tokens_per_second(self) -> float:
        return len(self.ids) / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Chunk:
    """One streamed piece: the text committed since the previous chunk."""
    text: str
    block: int
    n_blocks: int
    ids: List[int]
    steps: int
    seconds: float


class Stream:
    """Iterate for Chunk objects as blocks are committed; afterwards .result
    holds the Result. Leaving the loop early cancels the generation."""

    def __init__(self, engine, run):
        self._engine = engine
        self._stop = False  # the consumer left: stop at the next step
        self._q = queue.Queue()
        self.result: Optional[Result] = None
        self._error = None
        self._thread = threading.Thread(target=self._work, args=(run,), daemon=True)
        self._thread.start()

    def _work(self, run):
        try:
            self.result = run(self._q.put, lambda: self._stop)
        except BaseException as ex:  # handed to the consumer
            self._error = ex
        self._q.put(None)

    def __iter__(self) -> Iterator[Chunk]:
        done = False
        try:
            while True:
                try:
                    item = self._q.get(timeout=0.1)  # wakes up for Ctrl-C
                except queue.Empty:
                    continue
                if item is None:
                    done = True
                    break
                yield item
        finally:
            if not done:
                self._stop = True
                self._engine.cancel()
            self._thread.join()
        if self._error is not None and not (isinstance(self._error, Cancelled) and not done):
            raise self._error

    def __del__(self):
        if self._thread.is_alive():
            self._engine.cancel()


class Engine:
    """A model loaded once, as `tide run` would: tide.Engine(config, **overrides).

    config: an INI file path (or None for the built-in defaults).
    text:   INI text, applied after the file.
    sets:   ["section.key=value", ...], applied last.
    overrides: section__key=value or section={key: value}, e.g.
            Engine('config/llada2-tiny.ini', policy={'plugin': 'policy-lru', 'budget': 4},
                   generation__gen_length=64)
    plugin_path: extra plugin folders (':'-separated), searched first.
    log_level: 'error', 'warn', 'info' or 'debug' for the runtime's messages on
            stderr (process-wide); None keeps TIDE_LOG_LEVEL (default info).

    Not thread-safe: one call at a time (cancel() excepted).
    """

    def __init__(self, config: Optional[str] = None, *, text: Optional[str] = None,
                 sets: Sequence[str] = (), plugin_path: Optional[str] = None,
                 log_level: Optional[str] = None, **overrides):
        self._lib = _lib.load()
        self._h = None
        if log_level is not None:
            set_log_level(log_level)
        all_sets = list(sets) + _sets(overrides)
        arr = _cstrings(all_sets)
        paths = [p for p in (plugin_path, _lib.build_plugin_dir(_lib.library_path())) if p]
        args = _lib.EngineArgs(size=ctypes.sizeof(_lib.EngineArgs),
                               config_path=str(config).encode() if config else None,
                               config_text=text.encode() if text else None,
                               sets=arr, n_sets=len(all_sets),
                               plugin_path=":".join(paths).encode() if paths else None)
        h = c_void_p()
        rc = self._lib.tide_engine_open(byref(args), byref(h))
        if rc != _lib.OK:
            _raise(self._lib, None, rc)
        self._h = h
        self._pending = None

    # -- lifetime ----------------------------------------------------------
    def close(self):
        """Free the model and everything the engine holds (idempotent)."""
        if self._h:
            self._lib.tide_engine_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _handle(self):
        if not self._h:
            raise ValueError("the engine is closed")
        return self._h

    # -- generation ----------------------------------------------------------
    def generate(self, prompt: Union[str, Sequence[int]], *, stream: bool = False,
                 chat: Optional[bool] = None, max_tokens: Optional[int] = None,
                 gen_length: Optional[int] = None, temperature: Optional[float] = None,
                 top_p: Optional[float] = None, top_k: Optional[int] = None,
                 seed: Optional[int] = None, block_length: Optional[int] = None,
                 steps: Optional[int] = None, threshold: Optional[float] = None,
                 options: Optional[Dict[str, object]] = None, on_step=None, on_logits=None):
        """Generate from a text prompt or a list of token ids.

        None keeps the engine's [generation] value; max_tokens is gen_length.
        options: other [generation] keys for this request, {'recompute': True}.
        on_step(dict): after each denoising step; return True to cancel.
        on_logits(block, step, array): each step's logits (a numpy array
            [rows, vocab] when numpy is installed, else a list of rows); the
            array is only valid during the call.
        stream=False returns a Result; stream=True returns a Stream that
        yields a Chunk per committed block (its .result is set at the end).
        """
        self._handle()
        if max_tokens is not None and gen_length is not None and max_tokens != gen_length:
            raise ValueError("give max_tokens or gen_length, not both")
        typed = dict(gen_length=max_tokens if max_tokens is not None else gen_length,
                     temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                     block_length=block_length, steps=steps, threshold=threshold)
        req_sets = ["generation.%s=%s" % (k, _text(v)) for k, v in (options or {}).items()]

        def run(emit, stopped=None):
            return self._generate(prompt, chat, typed, req_sets, emit, stopped, on_step,
                                  on_logits)

        if stream:
            return Stream(self, run)
        return run(None)

    def _generate(self, prompt, chat, typed, req_sets, emit, stopped, on_step, on_logits):
        lib = self._lib
        req = _lib.Request()
        lib.tide_request_init(byref(req))
        keep = []  # everything C holds a pointer to during the call
        if isinstance(prompt, str):
            req.prompt = prompt.encode()
        else:
            ids = (c_int32 * max(len(prompt), 1))(*prompt)
            keep.append(ids)
            req.prompt_ids = ids
            req.n_prompt_ids = len(prompt)
        if chat is not None:
            req.chat = 1 if chat else 0
        for k, v in typed.items():
            if v is not None:
                if v < 0:
                    raise ValueError("%s must not be negative (got %r)" % (k, v))
                setattr(req, k, v)
        arr = _cstrings(req_sets)
        keep.append(arr)
        req.sets = arr
        req.n_sets = len(req_sets)
        self._pending = None
        delivered = [0]

        def guard(fn):
            """Run a callback; an exception (Ctrl-C included) cancels the
            generation and is raised again once it has stopped."""
            def wrapped(*a):
                if self._pending is not None:
                    return 1
                try:
                    return 1 if fn(*a) else 0
                except BaseException as ex:
                    self._pending = ex
                    return 1
            return wrapped

        def step_cb(user, ev):
            e = ev.contents
            if stopped is not None and stopped():
                return True
            if on_step is None:
                return False
            return on_step(dict(block=e.block, step=e.step, n_blocks=e.n_blocks,
                                committed=e.committed, remaining=e.remaining, tokens=e.tokens,
                                steps=e.steps, step_seconds=e.step_seconds, seconds=e.seconds,
                                edited=e.edited, edits=e.edits))

        def block_cb(user, ev):
            e = ev.contents
            if emit is None:
                return False
            delta = ctypes.string_at(e.delta, e.delta_len) if e.delta_len else b""
            delivered[0] += e.delta_len
            emit(Chunk(text=delta.decode("utf-8", "replace"), block=e.block,
                       n_blocks=e.n_blocks, ids=e.ids[:e.n_ids], steps=e.steps,
                       seconds=e.seconds))
            return False

        def logits_cb(user, ev):
            e = ev.contents
            try:
                import numpy as np
                arr = np.ctypeslib.as_array(e.logits, shape=(e.rows, e.vocab))
            except ImportError:
                flat = e.logits[:e.rows * e.vocab]
                arr = [flat[r * e.vocab:(r + 1) * e.vocab] for r in range(e.rows)]
            on_logits(e.block, e.step, arr)

        # The step callback always runs, so Ctrl-C stops within a step.
        req.on_step = _lib.ON_STEP(guard(step_cb))
        req.on_block = _lib.ON_BLOCK(guard(block_cb))
        if on_logits is not None:
            logits_guarded = guard(logits_cb)
            req.on_logits = _lib.ON_LOGITS(lambda u, ev: (logits_guarded(u, ev), None)[1])
        keep += [req.on_step, req.on_block, req.on_logits]
        out = POINTER(_lib.Result)()
        # Ctrl-C: Python would raise KeyboardInterrupt inside whichever
        # callback runs next, where ctypes can only print it. Instead, while
        # the call runs, SIGINT cancels the generation; it is raised after.
        interrupted = []
        old = None
        if (threading.current_thread() is threading.main_thread() and
                signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            def on_sigint(signum, frame):
                interrupted.append(signum)
                lib.tide_engine_cancel(self._h)
            old = signal.signal(signal.SIGINT, on_sigint)
        try:
            rc = lib.tide_engine_generate(self._h, byref(req), byref(out))
        finally:
            if old is not None:
                signal.signal(signal.SIGINT, old)
        try:
            if interrupted:
                raise KeyboardInterrupt
            if self._pending is not None:
                raise self._pending
            if rc not in (_lib.OK, _lib.E_CANCELLED):
                _raise(lib, self._h, rc)
            r = out.contents
            text = ctypes.string_at(r.text, r.text_len) if r.text_len else b""
            if emit is not None and delivered[0] < r.text_len:
                # The block events hold back an unfinished UTF-8 sequence at the end.
                emit(Chunk(text=text[delivered[0]:].decode("utf-8", "replace"),
                           block=max(r.blocks - 1, 0), n_blocks=r.blocks, ids=r.ids[:r.n_ids],
                           steps=r.steps, seconds=r.seconds))
            result = Result(
                text=text.decode("utf-8", "replace"), ids=r.ids[:r.n_ids],
                prompt_tokens=r.prompt_tokens, steps=r.steps, forwards=r.forwards,
                blocks=r.blocks, stopped=r.stopped, cancelled=r.cancelled, seconds=r.seconds,
                prefill_seconds=r.prefill_seconds, unknown_ids=r.unknown_ids,
                offload=OffloadStats._from(r.offload), edits=r.edits,
                model_forwards=r.model_forwards,
                **_dip_counters(r),
                params=dict(gen_length=r.gen_length, block_length=r.block_length,
                            steps=r.steps_per_block, threshold=r.threshold,
                            temperature=r.temperature, top_k=r.top_k, top_p=r.top_p,
                            seed=r.seed, chat=r.chat))
            if rc == _lib.E_CANCELLED:
                err = Cancelled(rc, lib.tide_engine_error(self._h).decode("utf-8", "replace"))
                err.result = result
                raise err
            return result
        finally:
            lib.tide_result_free(out)
            self._pending = None
            del keep

    def cancel(self):
        """Stop the generation in progress before its next step (any thread)."""
        if self._h:
            self._lib.tide_engine_cancel(self._h)

    # -- counters, information, options ---------------------------------------
    def stats(self, layer: Optional[int] = None) -> OffloadStats:
        """Offload counters summed over every generation since the engine
        opened (or since reset_stats); of one MoE layer (0-based) when layer
        is given."""
        s = _lib.OffloadStats(size=ctypes.sizeof(_lib.OffloadStats))
        if layer is None:
            rc = self._lib.tide_engine_stats(self._handle(), byref(s))
        else:
            rc = self._lib.tide_engine_layer_stats(self._handle(), layer, byref(s))
        if rc != _lib.OK:
            _raise(self._lib, self._h, rc)
        return OffloadStats._from(s)

    def reset_stats(self):
        self._lib.tide_engine_reset_stats(self._handle())

    @property
    def info(self) -> Dict[str, object]:
        """The model, backends, policy and shape that were opened."""
        i = _lib.EngineInfo(size=ctypes.sizeof(_lib.EngineInfo))
        rc = self._lib.tide_engine_get_info(self._handle(), byref(i))
        if rc != _lib.OK:
            _raise(self._lib, self._h, rc)
        out = {}
        for name, _ in _lib.EngineInfo._fields_[1:]:
            v = getattr(i, name)
            out[name] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        return out

    def option(self, name: str) -> str:
        """The current value of "section.key", as written in an INI file."""
        v = c_char_p()
        rc = self._lib.tide_engine_get_option(self._handle(), name.encode(), byref(v))
        if rc != _lib.OK:
            _raise(self._lib, self._h, rc)
        return v.value.decode()

    def set_options(self, *sets: str, **overrides):
        """Change [generation], [policy] or a policy plugin's
        options of the open engine; a policy change places the experts again
        (no reload). All or nothing."""
        items = list(sets) + _sets(overrides)
        arr = _cstrings(items)
        rc = self._lib.tide_engine_set_options(self._handle(), arr, len(items))
        if rc != _lib.OK:
            _raise(self._lib, self._h, rc)

    # -- tokens ----------------------------------------------------------------
    def tokenize(self, text: str, chat: bool = False) -> List[int]:
        b = text.encode()
        ids = POINTER(c_int32)()
        n = c_size_t()
        rc = self._lib.tide_engine_tokenize(self._handle(), b, len(b), 1 if chat else 0,
                                            byref(ids), byref(n))
        if rc != _lib.OK:
            _raise(self._lib, self._h, rc)
        try:
            return ids[:n.value]
        finally:
            self._lib.tide_free(ids)

    def detokenize(self, ids: Sequence[int]) -> str:
        arr = (c_int32 * max(len(ids), 1))(*ids)
        text = c_void_p()
        n = c_size_t()
        rc = self._lib.tide_engine_detokenize(self._handle(), arr, len(ids), byref(text),
                                              byref(n))
        if rc != _lib.OK:
            _raise(self._lib, self._h, rc)
        try:
            return ctypes.string_at(text, n.value).decode("utf-8", "replace")
        finally:
            self._lib.tide_free(text)


def set_log_level(level: str):
    """The runtime's log level for this process: error, warn, info or debug."""
    if level not in LOG_LEVELS:
        raise ValueError("log level %r: expected one of %s" % (level, ", ".join(LOG_LEVELS)))
    _lib.load().tide_log_set_level(LOG_LEVELS[level])


def version() -> str:
    """libtide's version."""
    return _lib.load().tide_version().decode()
