#!/usr/bin/env python3
"""Independent check: encode strings with TIDE's tokenizer (through tok_tool) and
with HuggingFace `tokenizers`, and compare the ids.

usage: hf_compare.py TOK_TOOL FIXTURE_JSON WORKDIR

Exits 77 (skipped) when no python3 on the machine can import `tokenizers`.
Tokenizers compared: one trained by tide_tokenizer_train (LLaDA2 layout), variants
of it (merges as pairs, GPT-2 ByteLevel regex, prefix space, overlapping
normalized/non-normalized added tokens), and the hand-written fixture with
variants (lstrip/rstrip, ignore_merges).
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys


def reexec_with_tokenizers():
    """Run this script under another python3 that has `tokenizers`, if any."""
    if os.environ.get("TIDE_HF_REEXEC"):
        return
    seen = {os.path.realpath(sys.executable)}
    for cand in (shutil.which("python3"), shutil.which("python"), "/usr/bin/python3",
                 "/usr/local/bin/python3"):
        if not cand or not os.path.exists(cand) or os.path.realpath(cand) in seen:
            continue
        seen.add(os.path.realpath(cand))
        ok = subprocess.run([cand, "-c", "import tokenizers"], capture_output=True).returncode
        if ok == 0:
            env = dict(os.environ, TIDE_HF_REEXEC="1")
            os.execve(cand, [cand] + sys.argv, env)


try:
    import tokenizers  # noqa: F401
    from tokenizers import Tokenizer
except ImportError:
    reexec_with_tokenizers()
    print("skipped: the Python package `tokenizers` is not importable (pip install tokenizers)")
    sys.exit(77)

SPECIALS = ["<|endoftext|>", "<|mask|>", "<|role_end|>", "<role>", "</role>"]

FIXED = [
    "", " ", "  ", "\n", "\r\n", "Hello, world!", "hello world", "The quick brown fox.",
    "  leading and trailing  ", "tabs\tand\t\ttabs", "a\n\nb\r\n\r\nc\rd", "\n \n  \n\t",
    "x  \n  y", "end with spaces   ", "   ", "\t\t\n",
    "In 2024 we had 157184 rows and 3.14 pi", "1,000,000", "٣٤٥ ３４ ² ½ Ⅻ ①",
    "emoji 😀😃🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷", "中文字符测试，日本語のテキスト、한국어 텍스트",
    "café naïve façade Ångström ß", "e\u0301 a\u030a \u0915\u093f\u0928\u094d",
    "\u00a0nbsp\u2009thin\u3000ideo\u0085nel\u000bvt\u000cff\u2028ls\u1680og\u200bzw\ufeffbom",
    "I'll you've we're he's DON'T Can't 'S 'lL 'Re 'VE 'm 'd 't",
    "’s ’ll 's's ''s '' 'x", "it'ſ Kelvin ſ 'ſ", "İstanbul ǅ ﬁ ẞ",
    "for (int i = 0; i < n; i++) { x[i] += y[i] * 2; }\n",
    "def f(x):\n    return x ** 2\n\n\n",
    "{\"a\": [1, 2, 3], \"b\": null}", "a-b_c.d/e\\f|g~h`i",
    "<|endoftext|>", "<role>HUMAN</role>Hi<|role_end|><role>ASSISTANT</role>",
    "x<|mask|><|mask|>y<|endoftext|>z", "<|endoftext|> partial <|endof <role tags </role>>",
    "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>"
    "What is 2+2?<|role_end|><role>ASSISTANT</role>",
    "!!!???...,,,", "....\n", "a.\n\nb", "--\n--", " ?!\r\n", "\u0000nul\u0001ctl\u007f",
    "\ufffd replacement \U0010ffff max", "fox jumps", "the fox jumped over fox jumps",
]

ALPHABET = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    + list(" \t\n\r.,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`")
    + ["\u00a0", "\u2009", "\u3000", "\u0085", "\u000b", "\u2028", "\u200b", "\ufeff", "’"]
    + list("éàüßñçÅøæœ") + list("αβγδΩπ") + list("жщюЯ") + list("中文字符测试")
    + list("한국어") + list("عربي") + ["\u0915", "\u093f", "\u094d", "\u0301"]
    + ["😀", "🎉", "👍", "🏽", "\u200d", "🇫", "🇷"] + list("٣３²½Ⅻ") + ["ſ", "K", "İ"]
    + ["'s", "'ll", "'VE", "the", " the", "  ", "\r\n", "\n\n", "123", "ing"]
    + SPECIALS + ["<|", "|>", "<role", "fox j", "ox"]
)

FIXTURE_ALPHABET = list("abcdehlowr12 \n") + ["<|x|>", "<|x|>y", "cab", "hello", " world"]


def random_strings(alphabet, count, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
            for _ in range(count)]


def tide_encode(tool, path, strings):
    data = b"".join(struct.pack("<I", len(s.encode("utf-8"))) + s.encode("utf-8")
                    for s in strings)
    r = subprocess.run([tool, "encode", path], input=data, capture_output=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr.decode("utf-8", "replace"))
        raise SystemExit(f"tok_tool encode {path} failed with {r.returncode}")
    lines = r.stdout.decode().split("\n")[: len(strings)]
    return [None if ln == "ERROR" else [int(x) for x in ln.split()] for ln in lines]


def compare(tool, name, path, strings, check_decode=False):
    hf = Tokenizer.from_file(path)
    ours = tide_encode(tool, path, strings)
    bad = 0
    for s, mine in zip(strings, ours):
        ref = hf.encode(s, add_special_tokens=False).ids
        if mine != ref:
            bad += 1
            if bad <= 10:
                print(f"MISMATCH [{name}] {s!r}\n  tide: {mine}\n  hf:   {ref}")
        elif check_decode and hf.decode(ref, skip_special_tokens=False) != s:
            bad += 1
            if bad <= 10:
                print(f"DECODE [{name}] {s!r} -> {hf.decode(ref, skip_special_tokens=False)!r}")
    print(f"{name}: {len(strings) - bad}/{len(strings)} strings agree")
    return bad


def write_variant(src, dst, edit):
    with open(src, encoding="utf-8") as f:
        j = json.load(f)
    edit(j)
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
    return dst


def main():
    tool, fixture, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    trained = os.path.join(work, "trained.json")
    if subprocess.run([tool, "train", trained]).returncode != 0:
        raise SystemExit("tok_tool train failed")
    print(f"tokenizers {tokenizers.__version__}, python {sys.version.split()[0]}")

    strings = FIXED + random_strings(ALPHABET, 3000, 1)
    # "fox j" matched with normalized true; the special "ox" (normalized false)
    # is cut out first, so "fox j" never matches where "ox" overlaps it.
    def add_overlap(j):
        n = max(t["id"] for t in j["added_tokens"]) + 1
        for k, (content, special) in enumerate([("fox j", False), ("ox", True)]):
            j["added_tokens"].append({"id": n + k, "content": content, "single_word": False,
                                      "lstrip": False, "rstrip": False,
                                      "normalized": not special, "special": special})

    def pairs_gpt2(j):
        j["model"]["merges"] = [m.split(" ", 1) for m in j["model"]["merges"]]
        j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": True, "use_regex": True}

    def prefix(j):
        j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True,
                              "trim_offsets": True, "use_regex": True}

    bad = compare(tool, "trained", trained, strings, check_decode=True)
    bad += compare(tool, "trained+overlap",
                   write_variant(trained, os.path.join(work, "overlap.json"), add_overlap),
                   strings)
    bad += compare(tool, "trained+pairs+gpt2",
                   write_variant(trained, os.path.join(work, "gpt2.json"), pairs_gpt2), strings)
    bad += compare(tool, "trained+prefix",
                   write_variant(trained, os.path.join(work, "prefix.json"), prefix), strings)

    fx = ["hello world", "abc", "bcd", "abcd", "12", "he\n", "<|x|>y<|x|>", "hello<|x|>",
          "cabd", "a <|x|> b", ""] + random_strings(FIXTURE_ALPHABET, 1000, 2)

    def strip(j):
        j["added_tokens"][0]["lstrip"] = True
        j["added_tokens"][0]["rstrip"] = True

    def ignore(j):
        j["model"]["ignore_merges"] = True
        del j["model"]["vocab"]["cd"]
        j["model"]["vocab"]["abc"] = 25
        j["model"]["merges"].remove("c d")

    def ids(j):  # HF renumbers added tokens that model.vocab lacks
        j["added_tokens"][0]["id"] = 40
        j["added_tokens"][2]["id"] = 7

    bad += compare(tool, "fixture", fixture, fx, check_decode=True)
    bad += compare(tool, "fixture+strip",
                   write_variant(fixture, os.path.join(work, "strip.json"), strip), fx)
    bad += compare(tool, "fixture+ignore_merges",
                   write_variant(fixture, os.path.join(work, "ignore.json"), ignore), fx)
    bad += compare(tool, "fixture+ids",
                   write_variant(fixture, os.path.join(work, "ids.json"), ids), fx)
    if bad:
        print(f"{bad} mismatches")
        sys.exit(1)


if __name__ == "__main__":
    main()
