#!/usr/bin/python3
"""Regenerate the seed corpora under tests/fuzz/corpus/ (committed).

Usage: make_seeds.py TIDE_BINARY
Synthetic seeds are built here with the standard library; a tiny checkpoint
made by `tide mkmodel` and a routing trace recorded by `tide run` on it add
real files. Seeds stay small (at most a few tens of KiB) so that fuzzing is fast.
Units merged in from long runs (libFuzzer -merge=1, SHA-1 names) are left alone.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def st_bytes(tensors, pad=True, meta=True, raw_header=None):
    """tensors: list of (name, dtype, shape, data bytes)."""
    header, blob = {}, b""
    if meta:
        header["__metadata__"] = {"format": "pt"}
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def seeds_safetensors():
    bf = lambda n: bytes(range(n)) * 2  # noqa: E731 (n bf16 values)
    good = [("a.weight", "BF16", [2, 3], bf(6)), ("b.bias", "F32", [4], b"\0\0\x80?" * 4),
            ("c.ids", "I64", [1], struct.pack("<q", 7)), ("d.half", "F16", [2], b"\0<\0<"),
            ("e.i32", "I32", [2, 1], struct.pack("<ii", 1, 2))]
    put("safetensors", "good", st_bytes(good))
    put("safetensors", "scalar-and-empty", st_bytes(
        [("s", "F32", [], b"\0\0\x80?"), ("z", "BF16", [0, 4], b"")]))
    put("safetensors", "no-metadata", st_bytes(good[:2], meta=False))
    put("safetensors", "unpadded", st_bytes(good[:1], pad=False))
    full = st_bytes(good)
    put("safetensors", "truncated", full[:-5])
    put("safetensors", "huge-header-len", struct.pack("<Q", 1 << 60) + full[8:])
    put("safetensors", "header-past-end", struct.pack("<Q", 4096) + full[8:64])
    put("safetensors", "short", b"\x10\0\0")
    h = b'{"x": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}, ' \
        b'"x": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 8]}}'
    put("safetensors", "duplicate-name", st_bytes([], raw_header=h) + b"\0" * 8)
    h = b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, ' \
        b'"y": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}}'
    put("safetensors", "overlap", st_bytes([], raw_header=h) + b"\0" * 8)
    h = b'{"x": {"dtype": "F32", "shape": [1152921504606846976], "data_offsets": [0, 4]}}'
    put("safetensors", "huge-shape", st_bytes([], raw_header=h) + b"\0" * 8)
    h = b'{"x": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}}'
    put("safetensors", "bad-dtype", st_bytes([], raw_header=h) + b"\0" * 4)
    h = b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [1, 5]}}'
    put("safetensors", "misaligned", st_bytes([], raw_header=h) + b"\0" * 8)
    put("safetensors", "not-json", st_bytes([], raw_header=b"{oops"))
    put("safetensors", "gap", st_bytes([], raw_header=b'{"x": {"dtype": "I32", "shape": [1], '
                                       b'"data_offsets": [8, 12]}}') + b"\0" * 4)


def seeds_st_index():
    sep = b"\n#SHARD#\n"
    s1 = st_bytes([("model.a", "BF16", [2, 2], b"\1\0" * 4), ("model.b", "F32", [1], b"\0" * 4)])
    s2 = st_bytes([("model.c", "BF16", [3], b"\2\0" * 3)])
    index = {"metadata": {"total_size": 26},
             "weight_map": {"model.a": "model-00001-of-00003.safetensors",
                            "model.b": "model-00001-of-00003.safetensors",
                            "model.c": "model-00002-of-00003.safetensors"}}
    put("st_index", "good", json.dumps(index, indent=2).encode() + sep + s1 + sep + s2)
    bad = json.loads(json.dumps(index))
    bad["weight_map"]["model.c"] = "model-00001-of-00003.safetensors"
    put("st_index", "wrong-shard", json.dumps(bad).encode() + sep + s1 + sep + s2)
    bad = json.loads(json.dumps(index))
    bad["weight_map"]["model.d"] = "model-00003-of-00003.safetensors"
    put("st_index", "missing-shard", json.dumps(bad).encode() + sep + s1 + sep + s2)
    bad = json.loads(json.dumps(index))
    bad["weight_map"]["model.a"] = "../etc/passwd"
    put("st_index", "path-escape", json.dumps(bad).encode() + sep + s1 + sep + s2)
    dup = st_bytes([("model.c", "BF16", [3], b"\2\0" * 3)])
    put("st_index", "tensor-in-two-shards", json.dumps(index).encode() + sep + s1 + sep + s2 +
        sep + dup)
    put("st_index", "empty-map", b'{"weight_map": {}}' + sep + s1)
    put("st_index", "not-object", b'[1, 2]')


def seeds_config_json(ckpt):
    base = json.load(open(os.path.join(ckpt, "config.json")))
    put("config_json", "tiny", json.dumps(base, indent=2))
    mini = dict(base, hidden_size=2048, num_hidden_layers=20, num_attention_heads=16,
                num_key_value_heads=4, head_dim=128, intermediate_size=5120,
                moe_intermediate_size=512, num_experts=256, num_experts_per_tok=8,
                n_group=8, topk_group=4, vocab_size=157184, max_position_embeddings=8192)
    put("config_json", "mini", json.dumps(mini))
    put("config_json", "minimal", json.dumps(
        {k: base[k] for k in ("model_type", "hidden_size", "num_hidden_layers",
                              "num_attention_heads", "intermediate_size",
                              "moe_intermediate_size", "num_experts", "num_experts_per_tok",
                              "vocab_size")}))
    put("config_json", "other-model", json.dumps(dict(base, model_type="llama")))
    put("config_json", "bad-group", json.dumps(dict(base, n_group=5)))
    put("config_json", "rotary", json.dumps(dict(base, partial_rotary_factor=0.25, rotary_dim=None)))
    put("config_json", "not-json", "{\"model_type\": \"llada2_moe\", oops")
    put("config_json", "array", "[]")


def seeds_tokenizer(ckpt):
    tiny = open(os.path.join(ROOT, "tests/tokenizer/fixtures/tiny.json"), "rb").read()
    put("tokenizer_json", "fixture-tiny", tiny)
    model = open(os.path.join(ckpt, "tokenizer.json"), "rb").read()
    put("tokenizer_json", "mkmodel-tiny", model)
    t = json.loads(tiny)
    t["model"]["merges"] = [m.split(" ") for m in t["model"]["merges"]]
    t["model"]["unk_token"] = "a"
    t["model"]["ignore_merges"] = True
    t["added_tokens"][0]["lstrip"] = True
    t["added_tokens"][1]["rstrip"] = True
    put("tokenizer_json", "pair-merges", json.dumps(t))
    t2 = json.loads(tiny)
    t2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}
    t2["decoder"] = None
    put("tokenizer_json", "bytelevel-only", json.dumps(t2))
    t3 = json.loads(tiny)
    t3["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"String": " "}
    put("tokenizer_json", "string-split", json.dumps(t3))
    put("tokenizer_json", "not-json", tiny[:300])
    enc = ["Hello, world!", "The quick brown fox, 2024 and 3.14159.\n",
           "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F600",
           "<|mask|><|mask|><role>HUMAN</role>Hi<|role_end|>", "   \t\r\n\r\n  x  ",
           "it's we'll they've I'M", "int main(void) { return 0; }"]
    for i, s in enumerate(enc):
        put("tokenizer_encode", "text-%d" % i, s)
    put("tokenizer_encode", "invalid-utf8", b"ok \xff\xfe \xc3 \xe6\x97 \xf0\x9f\x98 end\x00nul")
    put("tokenizer_encode", "long-space", b" " * 3000 + b"x")
    put("tokenizer_encode", "digits", b"0123456789" * 50)


def seeds_ini():
    for name in sorted(os.listdir(os.path.join(ROOT, "config"))):
        if name.endswith(".ini"):
            put("ini", "config-" + name, open(os.path.join(ROOT, "config", name), "rb").read())
    fx = os.path.join(ROOT, "tests/config/fixtures")
    for name in sorted(os.listdir(fx)):
        put("ini", "fixture-" + name, open(os.path.join(fx, name), "rb").read())
    sep = "\n#SET#\n"
    put("ini", "with-sets", "[generation]\nsteps = 8\n[test]\ncount = 3\n" + sep +
        "generation.threshold=0.5" + sep + "test.bytes=12GiB" + sep + "test.mode=slow" + sep +
        "policy.budget=-1" + sep + "test.flag=on")
    put("ini", "bad-sets", "" + sep + "generation.block_length=0" + sep + "generation.threshold=2" +
        sep + "policy.plugin" + sep + "nosuch.key=1" + sep + "test.ratio=nan" + sep +
        "test.bytes=1e3" + sep + "test.count=99999999999999999999")
    put("ini", "long-line", "[model]\npath = " + "x" * 300 + "\n")
    put("ini", "continuation", "[model]\npath = a\n  b\n")


def trace_bytes(meta, records):
    j = json.dumps(meta).encode()
    head = b"TIDETRC\0" + struct.pack("<II", 1, len(j)) + j
    head += b"\0" * ((8 - len(head) % 8) % 8)
    return head + b"".join(records)


def seeds_trace(trace_file):
    meta = {"n_layers": 2, "n_experts": 8, "top_k": 2, "hidden": 64, "inter": 32,
            "expert_bytes": 12288, "block_length": 4, "steps": 4, "threshold": 0.95,
            "model": "synthetic"}
    recs = [struct.pack("<BII", 1, 0, 5), struct.pack("<BiB", 2, 0, 1), struct.pack("<Bi", 3, 0)]
    for layer in range(2):
        recs.append(struct.pack("<BBII", 4, 1, layer, 2) + bytes([0, 1, 2, 3]))
    recs.append(struct.pack("<BBII", 4, 2, 0, 1) + bytes([7, 6]))
    put("trace", "synthetic", trace_bytes(meta, recs))
    wide = dict(meta, n_experts=300, top_k=3)
    put("trace", "u16-ids", trace_bytes(wide, [struct.pack("<BBII", 4, 0, 1, 1) +
                                                 struct.pack("<HHH", 299, 0, 256)]))
    put("trace", "truncated-record", trace_bytes(meta, recs)[:-1])
    put("trace", "bad-version", b"TIDETRC\0" + struct.pack("<II", 2, 2) + b"{}")
    put("trace", "bad-magic", b"NOTATRACE" + b"\0" * 16)
    put("trace", "empty-meta", trace_bytes({}, []))
    if trace_file:
        put("trace", "recorded", open(trace_file, "rb").read())


def seeds_serve_request():
    """`tide serve` bodies: the first byte picks the endpoint (0 completions,
    1 chat, 2 tokenize, 3 detokenize)."""
    def req(name, ep, body):
        put("serve_request", name, bytes([ep]) + (body if isinstance(body, bytes)
                                                  else json.dumps(body).encode()))
    req("completion", 0, {"model": "tiny", "prompt": "Hello", "max_tokens": 16,
                          "temperature": 0, "stop": ["\n\n", "END"], "seed": 3})
    req("completion-full", 0, {"prompt": "a", "max_tokens": 8, "temperature": 0.7,
                               "top_p": 0.9, "top_k": 5, "seed": 1, "stream": True,
                               "stream_options": {"include_usage": True}, "block_length": 32,
                               "steps": 8, "threshold": 0.9, "n": 1, "logprobs": None,
                               "echo": False, "user": "u"})
    req("completion-ids", 0, {"prompt": [1, 2, 3, 156892], "max_tokens": 4})
    req("completion-batch", 0, {"prompt": ["a", [5, 6], "b"], "stop": "x"})
    req("completion-bad-types", 0, {"prompt": 7, "max_tokens": "16", "stream": 1})
    req("completion-unsupported", 0, {"prompt": "a", "n": 2, "logprobs": 5, "suffix": "s"})
    req("chat", 1, {"messages": [{"role": "user", "content": "Hi"}],
                    "max_completion_tokens": 9})
    req("chat-parts", 1, {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}]}]})
    req("chat-multi", 1, {"messages": [{"role": "system", "content": "s"},
                                       {"role": "user", "content": "u"}]})
    req("tokenize", 2, {"prompt": "hello world", "add_special_tokens": False})
    req("tokenize-chat", 2, {"messages": [{"role": "user", "content": "hi"}]})
    req("detokenize", 3, {"tokens": [1, 2, 3]})
    req("malformed", 0, b'{"prompt": "a",')
    req("utf8", 0, rb'{"prompt":"\u00e9\ud83d\ude00 \u20ac","stop":["\u20ac"]}')


def main():
    tide = sys.argv[1]
    # Named seeds are rewritten; units merged in from fuzz runs (named by
    # their SHA-1) are kept.
    tmp = tempfile.mkdtemp(prefix="tide-seeds-")
    try:
        ckpt = os.path.join(tmp, "tiny")
        subprocess.run([tide, "--quiet", "mkmodel", ckpt, "--preset", "tiny"], check=True)
        trace = os.path.join(tmp, "t.tidetrace")
        subprocess.run([tide, "--quiet", "run", "--set", "model.path=" + ckpt, "--set",
                        "output.trace=" + trace, "--set", "generation.gen_length=32",
                        "--set", "output.stream=false", "--ids", "1,2,3,4,5"], check=True,
                       stdout=subprocess.DEVNULL)
        seeds_safetensors()
        seeds_st_index()
        seeds_config_json(ckpt)
        seeds_tokenizer(ckpt)
        seeds_ini()
        seeds_trace(trace)
        seeds_serve_request()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for t in sorted(os.listdir(CORPUS)):
        print("%-18s %d seeds" % (t, len(os.listdir(os.path.join(CORPUS, t)))))


if __name__ == "__main__":
    sys.exit(main())
