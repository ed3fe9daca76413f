#!/usr/bin/python3
"""model-llada2's decoder = auto: which release a checkpoint is, read from
the generate() signature of the class its config.json auto_map names
(plugins/model-llada2/llada2_family.c, docs/decoding.md "Which decoder a
checkpoint wants").

`tide inspect DIR` on one generated tiny checkpoint, each case writing its
own auto_map and remote-code files beside it. Each case checks the decoder
and that the reason names the file, the class and the parameter (or its
absence). The first cases are the two that a substring search for
`editing_threshold` got wrong: a 2.0 file naming it in a comment, a
docstring and a string, and a 2.1 file registered only under
AutoModelForMaskedLM, as dllm registers it.

Usage: test_decoder_detect.py PATH_TO_TIDE. Exit 0 pass, 1 fail."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

FAILS = []

SIG20 = '''    @torch.no_grad()
    def generate(
        self,
        inputs: Optional[torch.Tensor] = None,
        temperature=0.0,
        block_length=32,
        steps=32,
        gen_length=2048,
        top_p=None,
        top_k=None,
        eos_early_stop=False,
        minimal_topk=1,
        threshold=0.95,
        eos_id=156892,
        mask_id=156895,
    ):
        # LLaDA2.1 adds editing_threshold here; this is LLaDA2.0.
        """Block diffusion. (editing_threshold, a 2.1 parameter, is absent.)"""
        note = "editing_threshold=0.9 is not a parameter here"
        return note
'''

SIG21 = '''    @torch.no_grad()
    def generate(self, inputs: Optional[torch.Tensor] = None, temperature=0.0,
                 block_length=32, steps=32, gen_length=2048, top_p=None, top_k=None,
                 eos_early_stop=False, minimal_topk=1, threshold=0.95,
                 editing_threshold: float = 0.9, max_post_steps=16, eos_id=156892,
                 mask_id=156895, num_to_transfer=1):
        return None
'''


def module(cls, sig, base="LLaDA2MoePreTrainedModel, GenerationMixin", extra=""):
    return ('"""LLaDA2 modeling (test file)."""\nimport torch\nfrom typing import Optional\n\n\n'
            "class LLaDA2MoePreTrainedModel(PreTrainedModel):\n    config_class = None\n\n\n"
            "%sclass %s(%s):\n    _tied = ['lm_head.weight']\n\n    def __init__(self, config):\n"
            "        super().__init__(config)\n\n%s\n\n    def forward(self, x):\n"
            "        return x\n" % (extra, cls, base, sig))


def check(cond, what):
    print("  %s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        FAILS.append(what)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tide = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="tide-detect-")
    try:
        base = os.path.join(tmp, "base")
        subprocess.run([tide, "--quiet", "mkmodel", base, "--preset", "tiny", "--seed", "3"],
                       check=True)
        cfg = json.load(open(os.path.join(base, "config.json")))

        def case(name, auto_map, files, want, says):
            d = os.path.join(tmp, "c%d" % len(os.listdir(tmp)))
            shutil.copytree(base, d)
            c = dict(cfg)
            c.pop("auto_map", None)
            if auto_map is not None:
                c["auto_map"] = auto_map
            json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
            for fn, text in files.items():
                open(os.path.join(d, fn), "w").write(text)
            r = subprocess.run([tide, "inspect", d], capture_output=True, text=True)
            line = next((l for l in r.stdout.splitlines() if l.startswith("decoder:")), "")
            ok = r.returncode == 0 and line.startswith("decoder: decoder-%s (" % want)
            ok = ok and all(s in line for s in says)
            check(ok, "%s -> %s" % (name, line or r.stderr.strip()))

        causal = {"AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
                  "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM"}
        case("2.0 file naming editing_threshold in a comment, a docstring and a string",
             causal, {"modeling_llada2_moe.py": module("LLaDA2MoeModelLM", SIG20)}, "llada2",
             ["modeling_llada2_moe.py", "class LLaDA2MoeModelLM",
              "auto_map.AutoModelForCausalLM", "has no parameter editing_threshold"])
        masked = {"AutoConfig": "configuration_llada21_moe.LLaDA2MoeConfig",
                  "AutoModelForMaskedLM": "modeling_llada21_moe.LLaDA2MoeModelLM"}
        case("2.1 file registered only under AutoModelForMaskedLM (dllm)", masked,
             {"modeling_llada21_moe.py": module("LLaDA2MoeModelLM", SIG21)}, "llada21",
             ["modeling_llada21_moe.py", "class LLaDA2MoeModelLM",
              "auto_map.AutoModelForMaskedLM", "takes the parameter editing_threshold"])
        case("2.1 under a hub reference (repo--module.Class)",
             {"AutoModelForCausalLM": "inclusionAI/LLaDA2.1-mini--modeling_llada2_moe."
                                      "LLaDA2MoeModelLM"},
             {"modeling_llada2_moe.py": module("LLaDA2MoeModelLM", SIG21)}, "llada21",
             ["class LLaDA2MoeModelLM", "takes the parameter editing_threshold"])
        # generate() defined in a base class of the same file.
        inherit = module("LLaDA2Gen", SIG21) + (
            "\n\nclass LLaDA2MoeModelLM(LLaDA2Gen):\n    def forward(self, x):\n        return x\n")
        case("generate() in a base class", causal, {"modeling_llada2_moe.py": inherit},
             "llada21", ["class LLaDA2MoeModelLM", "defined in its base LLaDA2Gen",
                         "takes the parameter editing_threshold"])
        # Another class of the file has the 2.1 signature; the named one not.
        two = module("LLaDA2MoeModelLM", SIG20) + "\n\n" + module("Other", SIG21).split(
            "\n\n\n", 2)[2]
        case("another class's generate() does not count", causal,
             {"modeling_llada2_moe.py": two}, "llada2",
             ["class LLaDA2MoeModelLM", "has no parameter editing_threshold"])
        # editing_threshold read from **kwargs in the body is no parameter.
        kw = SIG20.replace("        mask_id=156895,\n    ):", "        **kwargs,\n    ):\n"
                           "        editing_threshold = kwargs.get('editing_threshold', 0.9)")
        case("editing_threshold only in the body (**kwargs)", causal,
             {"modeling_llada2_moe.py": module("LLaDA2MoeModelLM", kw)}, "llada2",
             ["has no parameter editing_threshold"])
        # A def generate inside a docstring, a nested function's parameter.
        tricky = module("LLaDA2MoeModelLM", SIG20.replace(
            '    @torch.no_grad()\n',
            '    """Example:\n    def generate(self, editing_threshold=0.9): ...\n    """\n\n'
            '    @torch.no_grad()\n').replace(
            "        return note", "        def inner(editing_threshold=0.5):\n"
            "            return editing_threshold\n        return note"))
        case("def generate in a docstring and a nested parameter", causal,
             {"modeling_llada2_moe.py": tricky}, "llada2",
             ["has no parameter editing_threshold"])
        case("no auto_map: the first class of modeling_llada2_moe.py with a generate()", None,
             {"modeling_llada2_moe.py": module("LLaDA2MoeModelLM", SIG21)}, "llada21",
             ["modeling_llada2_moe.py", "class LLaDA2MoeModelLM", "auto_map names none"])
        case("no remote code", causal, {}, "llada2",
             ["no remote-code file beside the checkpoint",
              "looked for modeling_llada2_moe.py:LLaDA2MoeModelLM, modeling_llada2_moe.py)", "LLaDA2.0 assumed"])
        case("a file without generate()", causal,
             {"modeling_llada2_moe.py": "class LLaDA2MoeModelLM:\n    pass\n"}, "llada2",
             ["no generate() in the remote code", "LLaDA2.0 assumed"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
