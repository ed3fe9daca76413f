#!/usr/bin/python3
"""llada_generate_ref.generate() on scripted logits, against hand-worked
expectations from LLaDA's generate.py (docs/decoding.md, rules L1-L12):

  L4  get_num_transfer_tokens: remainders to the first steps, 0-entries
  L2/L3 the two asserts
  L10 a more confident position past the block's end is not committed
  L11 the scheduled count, most confident first (lower position on ties)
  L7  cfg: the argmax of un + (cfg + 1)(cond - un), not of cond
  L5/L12 the mask token chosen stays a candidate, and a later block's step
      may fill an earlier block's leftover mask
  forwards: one per step, two with cfg; every step runs even with nothing
      left to commit
Exit 0 pass, 1 fail, 77 skipped (no numpy).
"""
import os
import sys

try:
    import numpy as np
except ImportError:
    print("skipped: numpy is not importable by", sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llada_generate_ref as LR  # noqa: E402
from llada2_ref import RefError  # noqa: E402

V, MASK, EOS = 8, 7, 0
FAILS = []


def check(cond, what):
    print("  %s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        FAILS.append(what)


class Scripted:
    """logits(pos) = sharp[pos] on token want[pos], 0 elsewhere; counts calls."""

    def __init__(self, want, sharp):
        self.want, self.sharp, self.calls = want, sharp, 0

    def __call__(self, ids):
        self.calls += 1
        lg = np.zeros((len(ids), V), np.float32)
        for i in range(len(ids)):
            lg[i, self.want.get(i, 1)] = self.sharp.get(i, 1.0)
        return lg


def main():
    check(LR.get_num_transfer_tokens(8, 3) == [3, 3, 2], "L4: 8 masks in 3 steps = 3,3,2")
    check(LR.get_num_transfer_tokens(2, 4) == [1, 1, 0, 0], "L4: 2 masks in 4 steps = 1,1,0,0")
    for kw, what in ((dict(gen_length=6, block_length=4, steps=2), "L2: G % L"),
                     (dict(gen_length=8, block_length=4, steps=3), "L3: steps % blocks")):
        try:
            LR.generate(Scripted({}, {}), [1, 2], mask_id=MASK, eos_id=EOS, **kw)
            check(False, what + " refused")
        except RefError:
            check(True, what + " refused")

    # Prompt [1, 2]; G 4, L 2: blocks [2,4) and [4,6); 2 steps per block.
    # Position 4 is the most confident of all, but lies past block 0.
    f = Scripted({2: 3, 3: 4, 4: 5, 5: 6}, {2: 1.0, 3: 2.0, 4: 9.0, 5: 0.5})
    tr, st = [], {}
    out = LR.generate(f, [1, 2], 4, 2, 4, MASK, EOS, trace=tr, stats=st)
    check([t["commit"] for t in tr] == [[3], [2], [4], [5]],
          "L10/L11: commits 3, 2 (block 0, most confident first), then 4, 5")
    check(out == [3, 4, 5, 6], "L12: output %s" % out)
    check(st["forwards"] == f.calls == 4 and st["steps"] == 4, "one forward per step")

    # Ties: equal confidence commits the lower position first.
    f = Scripted({2: 3, 3: 4}, {2: 2.0, 3: 2.0})
    tr = []
    LR.generate(f, [1, 2], 2, 2, 2, MASK, EOS, trace=tr)
    check(tr[0]["commit"] == [2], "L11: a tie goes to the lower position")

    # cfg: cond favours token 1 (2.0 vs 1.9), un favours token 1 more (2 vs 0):
    # un + 2 (cond - un) gives token 1: 2, token 2: 3.8.
    class Cfg:
        calls = 0

        def __call__(self, ids):
            Cfg.calls += 1
            lg = np.zeros((len(ids), V), np.float32)
            lg[:, 1] = 2.0
            if ids[0] != MASK:  # conditional: the prompt is visible
                lg[:, 2] = 1.9
            return lg
    out = LR.generate(Cfg(), [3, 4], 2, 2, 2, MASK, EOS, cfg_scale=1.0, stats=st)
    check(out == [2, 2], "L7: cfg picks the guided token (%s)" % out)
    check(st["forwards"] == 2 * st["steps"] == Cfg.calls, "L7: two forwards per step")
    out = LR.generate(Cfg(), [3, 4], 2, 2, 2, MASK, EOS)
    check(out == [1, 1], "without cfg the conditional argmax (%s)" % out)

    # The mask token wins at position 2 during block 0, then loses: block 1's
    # step fills it (L5: every masked position before the block's end).
    class Flip:
        calls = 0

        def __call__(self, ids):
            Flip.calls += 1
            lg = np.zeros((len(ids), V), np.float32)
            lg[:, 3] = 1.0
            lg[2, MASK if Flip.calls <= 2 else 5] = 4.0
            return lg
    tr = []
    out = LR.generate(Flip(), [1, 2], 4, 2, 4, MASK, EOS, trace=tr)
    check(tr[0]["commit"] == [2] and tr[2]["commit"] == [2],
          "L12/L5: the mask token committed at 2 stays a candidate and block 1 fills it")
    # Block 1's schedule (2 masks: 1, 1) is spent on the leftovers 2 and 3,
    # so its own positions stay masked, as in the official loop.
    check(out == [5, 3, MASK, MASK], "the leftovers take block 1's schedule (%s)" % out)

    # EOS cut; 0-entry steps still forward.
    f = Scripted({2: 3, 3: EOS, 4: 4, 5: 4}, {})
    st = {}
    out = LR.generate(f, [1, 2], 4, 2, 6, MASK, EOS, stats=st)
    check(out == [3, EOS], "output cut after the first EOS (%s)" % out)
    check(st["forwards"] == 6 == f.calls, "3 steps per block, 2 masks: the 0-entry step runs")
    st = {}
    out = LR.generate(Scripted({2: 3, 3: EOS, 4: 4, 5: 4}, {}), [1, 2], 4, 2, 6, MASK, EOS,
                      eos_early_stop=True, stats=st)
    check(out == [3, EOS] and st["forwards"] == 3 and st["blocks"] == 1,
          "eos_early_stop: the same ids after one block")

    print("%d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
