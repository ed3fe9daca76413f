#!/usr/bin/python3
"""The plugin SDK from the outside: install this build into a temporary
prefix, then build examples/out-of-tree-policy and examples/embed-c in a
temporary folder with nothing but the installed files (the CMake package,
and tide.pc for a plugin compiled by hand), and check that

  - the example's own unit test passes (ctest in its build folder);
  - the plugin exports only tide_plugin_entry, and installs with its rule;
  - the installed `tide plugins` loads it from TIDE_PLUGIN_PATH, and finds
    its own plugins in the relocated prefix (not in this build tree);
  - `tide run` with it on a generated tiny checkpoint, offloading (budgets
    4 and 1), gives the same ids and logits hash as no offload, and it did
    offload (promotions and host rows in the summary);
  - a program embedding libtide (tide/engine.h) runs against the install.

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


def sdk(build, source, cmake, ctest, cc, sanitize, tmp):
    prefix = os.path.join(tmp, "prefix")
    run([cmake, "--install", build, "--prefix", prefix])
    tide = os.path.join(prefix, "bin", "tide")
    check(os.path.isfile(os.path.join(prefix, "lib", "cmake", "tide", "tideConfig.cmake")),
          "the CMake package is installed")
    pc_dir = os.path.join(prefix, "lib", "pkgconfig")
    check(os.path.isfile(os.path.join(pc_dir, "tide.pc")), "tide.pc is installed")

    # Only the example's files, in a folder of their own.
    src = os.path.join(tmp, "src")
    shutil.copytree(os.path.join(source, "examples", "out-of-tree-policy"), src)
    bld = os.path.join(tmp, "build")
    run([cmake, "-S", src, "-B", bld] + configure_args(prefix, cc, sanitize))
    cache = open(os.path.join(bld, "CMakeCache.txt")).read()
    m = re.search(r"^tide_DIR:PATH=(.*)$", cache, re.M)
    check(m is not None and m.group(1).startswith(prefix),
          "find_package(tide) found the installed package",
          "tide_DIR = %s" % (m.group(1) if m else None))
    check(os.path.realpath(build) not in cache and os.path.realpath(source) not in cache,
          "the example's build does not refer to this source or build tree")
    run([cmake, "--build", bld])
    r = run([ctest, "--test-dir", bld, "--output-on-failure"], ok=False)
    check(r.returncode == 0, "the example's unit test passes", r.stdout + r.stderr)
    plugin = os.path.join(bld, "policy-example.so")
    check(os.path.isfile(plugin), "tide_add_plugin built policy-example.so (no lib prefix)")
    nm = shutil.which("nm")
    if nm:
        syms = run([nm, "-D", "--defined-only", plugin]).stdout.split()
        exported = [s for s in syms if s.startswith("tide") or s.startswith("ex_")]
        check(exported == ["tide_plugin_entry"], "the plugin exports only tide_plugin_entry",
              " ".join(syms))
    user = os.path.join(tmp, "user")
    run([cmake, "--install", bld, "--prefix", user])
    user_plugins = os.path.join(user, "lib", "tide", "plugins")
    check(os.path.isfile(os.path.join(user_plugins, "policy-example.so")),
          "the plugin installs into <prefix>/lib/tide/plugins")

    # The installed tide loads it, and its own plugins from the prefix.
    env = dict(os.environ, TIDE_PLUGIN_PATH=user_plugins)
    env.pop("TIDE_LOG_LEVEL", None)
    out = run([tide, "plugins"], env=env).stdout
    rows = [l.split() for l in out.splitlines()
            if re.match(r"^\S+ +(model|backend|policy) +\S+ +\d+ +(ok|unusable) +/", l)]
    ex = [r for r in rows if r[0] == "policy-example"]
    check(len(ex) == 1 and ex[0][4] == "ok" and
          os.path.realpath(ex[0][5]) == os.path.realpath(os.path.join(user_plugins,
                                                                        "policy-example.so")),
          "tide plugins loads policy-example from TIDE_PLUGIN_PATH", out)
    own = [r for r in rows if r[0] != "policy-example"]
    real_prefix = os.path.realpath(prefix)
    check(own and all(os.path.realpath(r[5]).startswith(real_prefix) for r in own),
          "the relocated tide finds its own plugins in its prefix", out)

    # The same build through pkg-config, by hand.
    pkg = shutil.which("pkg-config")
    if pkg:
        penv = dict(os.environ, PKG_CONFIG_PATH=pc_dir)
        flags = run([pkg, "--cflags", "--libs", "tide"], env=penv).stdout.split()
        libdir = run([pkg, "--variable=libdir", "tide"], env=penv).stdout.strip()
        pc_out = os.path.join(tmp, "pc")
        os.mkdir(pc_out)
        cmd = [cc, "-std=c11", "-shared", "-fPIC", "-fvisibility=hidden",
               os.path.join(src, "policy_example.c"), "-o",
               os.path.join(pc_out, "policy-example.so"), "-Wl,--no-undefined",
               "-Wl,-rpath," + libdir] + flags
        if sanitize:
            cmd += ["-fsanitize=address,undefined"]
        run(cmd)
        out = run([tide, "plugins"], env=dict(env, TIDE_PLUGIN_PATH=pc_out)).stdout
        check(re.search(r"^policy-example +policy +0\.1\.0 +\d+ +ok ", out, re.M) is not None,
              "a plugin built with pkg-config flags loads", out)

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
    r = run([os.path.join(ebld, "embed"), ini, "Hello", "generation.stepz=3"], env=env, ok=False)
    check(r.returncode == 1 and "did you mean 'steps'?" in r.stderr,
          "the embedding example reports a bad option with the engine's message", r.stderr)
    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
