#!/usr/bin/python3
"""The plugin SDK from the outside: install this build into a temporary
prefix, then build examples/out-of-tree-policy, examples/out-of-tree-decoder
and examples/embed-c in a temporary folder with nothing but the installed
files (the CMake package, and tide.pc for plugins compiled by hand), and
check that

  - the decoders' and the policies' header-only helpers are installed, and
    the policy example includes one (policy-common/plan.h);
  - each plugin example's own unit test passes (ctest in its build folder);
  - each plugin exports only tide_plugin_entry, and installs with its rule;
  - the installed `tide plugins` loads both from TIDE_PLUGIN_PATH (the
    decoder with kind decoder), and finds its own plugins in the relocated
    prefix (not in this build tree);
  - the installed `tide policy-check` passes policy-example, found by name
    on TIDE_PLUGIN_PATH and by the path of its .so;
  - `tide run` with the policy on a generated tiny checkpoint, offloading
    (budgets 4 and 1), gives the same ids and logits hash as no offload, and
    it did offload (promotions and host rows in the summary);
  - `tide run` with the decoder (generation.decoder=ltr) decodes one token
    per step (steps == tokens in the summary), the same ids under the
    offloading policy, fewer steps with its min_confidence, and an invalid
    or unsupported setting is refused naming the key;
  - a program embedding libtide (tide/engine.h) runs against the install,
    with either plugin.

usage: test_sdk.py BUILD_DIR SOURCE_DIR CMAKE C_COMPILER SANITIZE(0|1)
Exit status 0 when every check holds, 1 otherwise, 77 when a tool is missing.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

PROMPT = ",".join(str(7 + (i * 37) % 400) for i in range(40))
failures = 0


def check(cond, what, detail=""):
    global failures
    print("%s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        failures += 1
        if detail:
            print(detail)


def run(cmd, env=None, cwd=None, ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env, cwd=cwd)
    if ok and r.returncode != 0:
        print("FAILED (exit %d): %s" % (r.returncode, " ".join(cmd)))
        print(r.stdout[-4000:])
        print(r.stderr[-4000:])
        sys.exit(1)
    return r


def main():
    if len(sys.argv) != 6:
        print(__doc__)
        return 2
    build, source, cmake, cc, sanitize = sys.argv[1:]
    ctest = os.path.join(os.path.dirname(cmake), "ctest")
    if not shutil.which(ctest):
        ctest = shutil.which("ctest")
    if not ctest:
        print("skipped: no ctest next to", cmake)
        return 77
    tmp = tempfile.mkdtemp(prefix="tide-sdk-")
    try:
        return sdk(build, source, cmake, ctest, cc, sanitize == "1", tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def configure_args(prefix, cc, sanitize):
    args = ["-DCMAKE_PREFIX_PATH=" + prefix, "-DCMAKE_C_COMPILER=" + cc,
            "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", "-DCMAKE_BUILD_TYPE=RelWithDebInfo"]
    if sanitize:
        # libtide is built with ASan here: whatever links it must be too.
        f = "-fsanitize=address,undefined -fno-omit-frame-pointer"
        args += ["-DCMAKE_C_FLAGS=" + f, "-DCMAKE_EXE_LINKER_FLAGS=" + f,
                 "-DCMAKE_MODULE_LINKER_FLAGS=" + f]
    return args


def build_example(source, build, prefix, user, cmake, ctest, cc, sanitize, tmp, folder, name,
                  internal):
    """Copy examples/<folder> alone, build it against the install, run its
    unit test, check what the plugin exports, install it under user. Returns
    the copy's folder. `internal`: prefixes of the plugin's own statics."""
    src = os.path.join(tmp, folder + "-src")
    shutil.copytree(os.path.join(source, "examples", folder), src)
    bld = os.path.join(tmp, folder + "-build")
    run([cmake, "-S", src, "-B", bld] + configure_args(prefix, cc, sanitize))
    cache = open(os.path.join(bld, "CMakeCache.txt")).read()
    m = re.search(r"^tide_DIR:PATH=(.*)$", cache, re.M)
    check(m is not None and m.group(1).startswith(prefix),
          "%s: find_package(tide) found the installed package" % folder,
          "tide_DIR = %s" % (m.group(1) if m else None))
    check(os.path.realpath(build) not in cache and os.path.realpath(source) not in cache,
          "%s: the build does not refer to this source or build tree" % folder)
    run([cmake, "--build", bld])
    r = run([ctest, "--test-dir", bld, "--output-on-failure"], ok=False)
    check(r.returncode == 0 and "tests passed" in r.stdout,
          "%s: the example's unit test passes" % folder, r.stdout + r.stderr)
    plugin = os.path.join(bld, name + ".so")
    check(os.path.isfile(plugin), "tide_add_plugin built %s.so (no lib prefix)" % name)
    nm = shutil.which("nm")
    if nm and os.path.isfile(plugin):
        syms = run([nm, "-D", "--defined-only", plugin]).stdout.split()
        exported = [s for s in syms if s.startswith(("tide",) + internal)]
        check(exported == ["tide_plugin_entry"], "%s exports only tide_plugin_entry" % name,
              " ".join(syms))
    run([cmake, "--install", bld, "--prefix", user])
    check(os.path.isfile(os.path.join(user, "lib", "tide", "plugins", name + ".so")),
          "%s installs into <prefix>/lib/tide/plugins" % name)
    return src


DONE = re.compile(r"done: (\d+) tokens in (\d+) blocks, (\d+) steps")


def check_decoder(tide, env, base):
    """`tide run` with the out-of-tree decoder on the tiny checkpoint (base:
    the arguments of a 64-token run of the 40-token PROMPT)."""
    ltr = base + ["--set", "generation.decoder=ltr"]
    r = run([tide] + ltr, env=env, ok=False)
    m = DONE.search(r.stderr)
    check(r.returncode == 0 and m is not None, "tide run with decoder-ltr succeeds",
          r.stdout[-2000:] + r.stderr[-2000:])
    if not m:
        return
    n, blocks, steps = (int(g) for g in m.groups())
    stopped = "stopped at end-of-text" in r.stderr
    # No EOS: 64 tokens; the prompt's tail block and two more (40 + 64 in 32s).
    check(steps == n and (stopped or (n == 64 and blocks == 3)),
          "decoder-ltr decodes one token per step (done: %d tokens in %d blocks, %d steps%s)"
          % (n, blocks, steps, ", stopped" if stopped else ""), r.stderr[-2000:])
    check(re.search(r"decoder ltr: .*min_confidence=0\b", r.stderr) is not None,
          "the run logs decoder-ltr's describe()", r.stderr[-2000:])
    # Placement never changes tokens, whoever writes the loop and the policy.
    got = run([tide] + ltr + ["--set", "policy.plugin=policy-example", "--set",
                              "policy.budget=4"], env=env, ok=False)
    check(got.returncode == 0 and got.stdout == r.stdout,
          "decoder-ltr gives the same ids and logits hash under policy-example, budget 4",
          "want:\n%s\ngot:\n%s%s" % (r.stdout, got.stdout, got.stderr[-2000:]))
    # Its own option: more than one token per step where the model is sure.
    got = run([tide] + ltr + ["--set", "decoder-ltr.min_confidence=0.5"], env=env, ok=False)
    m2 = DONE.search(got.stderr)
    check(got.returncode == 0 and m2 is not None and int(m2.group(3)) <= int(m2.group(1)),
          "decoder-ltr with min_confidence = 0.5 runs, in at most one step per token",
          got.stderr[-2000:])
    # Refusals name the key.
    for sets, says in ((["decoder-ltr.min_confidence=1.5"], "[decoder-ltr] min_confidence"),
                       (["decoder-ltr.min_confidense=0.5"], "did you mean 'min_confidence'?"),
                       (["generation.temperature=0.7"], "[generation] temperature"),
                       (["generation.recompute=true"], "[generation] recompute")):
        args = list(ltr)
        for x in sets:
            args += ["--set", x]
        bad = run([tide] + args, env=env, ok=False)
        check(bad.returncode != 0 and says in bad.stderr and not DONE.search(bad.stderr),
              "decoder-ltr refuses %s, naming the key" % " ".join(sets), bad.stderr[-2000:])


def sdk(build, source, cmake, ctest, cc, sanitize, tmp):
    prefix = os.path.join(tmp, "prefix")
    run([cmake, "--install", build, "--prefix", prefix])
    tide = os.path.join(prefix, "bin", "tide")
    check(os.path.isfile(os.path.join(prefix, "lib", "cmake", "tide", "tideConfig.cmake")),
          "the CMake package is installed")
    pc_dir = os.path.join(prefix, "lib", "pkgconfig")
    check(os.path.isfile(os.path.join(pc_dir, "tide.pc")), "tide.pc is installed")
    check(os.path.isfile(os.path.join(prefix, "include", "decoder-common", "sample.h")),
          "the decoders' header-only helpers are installed (include/decoder-common)")
    check(all(os.path.isfile(os.path.join(prefix, "include", "policy-common", h))
              for h in ("plan.h", "rank.h", "initial.h", "fullswap.h", "costs.h", "rentbuy.h")),
          "the policies' header-only helpers are installed (include/policy-common)")
    check('#include "policy-common/plan.h"' in
          open(os.path.join(source, "examples", "out-of-tree-policy", "policy_example.c")).read(),
          "the policy example includes an installed policy-common header")

    # Each example alone, built and tested against the install, installed
    # into one user prefix.
    user = os.path.join(tmp, "user")
    user_plugins = os.path.join(user, "lib", "tide", "plugins")
    policy_src = build_example(source, build, prefix, user, cmake, ctest, cc, sanitize, tmp,
                               "out-of-tree-policy", "policy-example", ("ex_",))
    decoder_src = build_example(source, build, prefix, user, cmake, ctest, cc, sanitize, tmp,
                                "out-of-tree-decoder", "decoder-ltr", ("ltr_", "dc_", "probs_"))
    examples = ("policy-example", "decoder-ltr")

    # The installed tide loads them, and its own plugins from the prefix.
    env = dict(os.environ, TIDE_PLUGIN_PATH=user_plugins)
    env.pop("TIDE_LOG_LEVEL", None)
    out = run([tide, "plugins"], env=env).stdout
    rows = [l.split() for l in out.splitlines()
            if re.match(r"^\S+ +(model|backend|policy|decoder) +\S+ +\d+ +(ok|unusable) +/", l)]
    for name, kind in (("policy-example", "policy"), ("decoder-ltr", "decoder")):
        ex = [r for r in rows if r[0] == name]
        check(len(ex) == 1 and ex[0][1] == kind and ex[0][4] == "ok" and
              os.path.realpath(ex[0][5]) == os.path.realpath(os.path.join(user_plugins,
                                                                            name + ".so")),
              "tide plugins loads %s (kind %s) from TIDE_PLUGIN_PATH" % (name, kind), out)
    own = [r for r in rows if r[0] not in examples]
    real_prefix = os.path.realpath(prefix)
    check(own and all(os.path.realpath(r[5]).startswith(real_prefix) for r in own),
          "the relocated tide finds its own plugins in its prefix", out)

    # The installed kit checks the out-of-tree policy: by name on
    # TIDE_PLUGIN_PATH (properties and lossless), and by its file.
    r = run([tide, "--quiet", "policy-check", "policy-example", "--seeds", "2"], env=env, ok=False)
    check(r.returncode == 0 and "policy-check: policy-example: PASS" in r.stdout and
          re.search(r"^  4 +same +same ", r.stdout, re.M) is not None,
          "the installed tide policy-check passes policy-example (properties and lossless)",
          r.stdout[-4000:] + r.stderr[-2000:])
    so = os.path.join(user_plugins, "policy-example.so")
    bare = dict(os.environ)
    bare.pop("TIDE_PLUGIN_PATH", None)
    r = run([tide, "--quiet", "policy-check", so, "--only", "props", "--seeds", "1", "--set",
             "policy-example.max_promotions=1"], env=bare, ok=False)
    check(r.returncode == 0 and "policy-check: policy-example: PASS" in r.stdout,
          "tide policy-check takes the path of the .so (and the plugin's options)",
          r.stdout[-4000:] + r.stderr[-2000:])

    # The same builds through pkg-config, by hand (decoder-common/*.h are
    # found with tide.pc's include folder too).
    pkg = shutil.which("pkg-config")
    if pkg:
        penv = dict(os.environ, PKG_CONFIG_PATH=pc_dir)
        flags = run([pkg, "--cflags", "--libs", "tide"], env=penv).stdout.split()
        libdir = run([pkg, "--variable=libdir", "tide"], env=penv).stdout.strip()
        pc_out = os.path.join(tmp, "pc")
        os.mkdir(pc_out)
        for name, c in (("policy-example", os.path.join(policy_src, "policy_example.c")),
                        ("decoder-ltr", os.path.join(decoder_src, "decoder_ltr.c"))):
            cmd = [cc, "-std=c11", "-shared", "-fPIC", "-fvisibility=hidden", c, "-o",
                   os.path.join(pc_out, name + ".so"), "-Wl,--no-undefined",
                   "-Wl,-rpath," + libdir] + flags + ["-lm"]
            if sanitize:
                cmd += ["-fsanitize=address,undefined"]
            run(cmd)
        out = run([tide, "plugins"], env=dict(env, TIDE_PLUGIN_PATH=pc_out)).stdout
        for name, kind in (("policy-example", "policy"), ("decoder-ltr", "decoder")):
            check(re.search(r"^%s +%s +0\.1\.0 +\d+ +ok " % (name, kind), out, re.M) is not None,
                  "%s built with pkg-config flags loads" % name, out)

    # Lossless under the new policy.
    model = os.path.join(tmp, "tiny")
    run([tide, "--quiet", "mkmodel", model, "--preset", "tiny", "--seed", "11"], env=env)
    base = ["run", "--set", "model.path=" + model, "--set", "backend.device=backend-cpu-onednn",
            "--set", "generation.gen_length=64", "--set", "output.progress=false",
            "--set", "output.stream=false", "--ids", PROMPT, "--print-ids", "--logits-hash"]
    want = run([tide] + base, env=env)
    for sets in (["policy.budget=4"], ["policy.budget=1", "policy-example.max_promotions=1"]):
        args = base + ["--set", "policy.plugin=policy-example"]
        for s in sets:
            args += ["--set", s]
        got = run([tide] + args, env=env)
        check(got.stdout == want.stdout, "lossless with policy-example, %s" % " ".join(sets),
              "want:\n%s\ngot:\n%s" % (want.stdout, got.stdout))
        row = re.search(r"^policy-example +(\d+) +([\d.]+)% +(\d+) +(\d+) ", got.stderr, re.M)
        check(row is not None and int(row.group(3)) > 0 and int(row.group(4)) > 0,
              "policy-example offloaded (host rows and promotions in the summary)",
              got.stderr[-2000:])

    check_decoder(tide, env, base)

    # A program embedding libtide, against the install.
    esrc = os.path.join(tmp, "embed-src")
    shutil.copytree(os.path.join(source, "examples", "embed-c"), esrc)
    ebld = os.path.join(tmp, "embed-build")
    run([cmake, "-S", esrc, "-B", ebld] + configure_args(prefix, cc, sanitize))
    run([cmake, "--build", ebld])
    ini = os.path.join(tmp, "e.ini")
    with open(ini, "w") as f:
        f.write("[model]\npath = %s\n[backend]\ndevice = backend-cpu-onednn\n" % model)
    r = run([os.path.join(ebld, "embed"), ini, "Hello", "generation.gen_length=32",
             "policy.plugin=policy-example", "policy.budget=4"], env=env, ok=False)
    check(r.returncode == 0 and re.search(r"^ids: \d+(,\d+)*$", r.stdout, re.M) is not None and
          "promotions" in r.stdout, "the embedding example generates with policy-example",
          r.stdout[-2000:] + r.stderr[-2000:])
    r = run([os.path.join(ebld, "embed"), ini, "Hello", "generation.gen_length=32",
             "generation.decoder=ltr"], env=env, ok=False)
    m = re.search(r"^prompt \d+ tokens, generated (\d+) in \d+ blocks, (\d+) steps", r.stdout, re.M)
    check(r.returncode == 0 and m is not None and int(m.group(1)) == int(m.group(2)) > 0,
          "the embedding example generates with decoder-ltr, one token per step",
          r.stdout[-2000:] + r.stderr[-2000:])
    r = run([os.path.join(ebld, "embed"), ini, "Hello", "generation.stepz=3"], env=env, ok=False)
    check(r.returncode == 1 and "did you mean 'steps'?" in r.stderr,
          "the embedding example reports a bad option with the engine's message", r.stderr)
    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
