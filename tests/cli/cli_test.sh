#!/bin/sh
# Runs the real `tide` binary and checks its output and exit code.
# usage: cli_test.sh CASE TIDE TEST_PLUGIN_DIR FIXTURE_DIR VERSION
# Each CASE is one ctest test (see CMakeLists.txt). On a mismatch it prints
# what was expected and what came out, and exits 1.
set -u
case_name=$1 tide=$2 bad_dir=$3 fixtures=$4 version=$5
# The loader reports real paths.
bad_dir=$(cd "$bad_dir" && pwd -P) || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/tide-cli.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
failed=0
unset TIDE_PLUGIN_PATH TIDE_LOG_LEVEL

# run [ENV=VALUE ...] -- ARGS...: run tide, keep stdout, stderr and the status.
run() {
    envs=
    while [ "$1" != -- ]; do
        envs="$envs $1"
        shift
    done
    shift
    last="tide $*"
    # shellcheck disable=SC2086
    env $envs "$tide" "$@" >"$work/out" 2>"$work/err"
    status=$?
}

fail() {
    echo "FAIL ($last): $*"
    failed=1
}

show() {
    echo "--- stdout:"
    cat "$work/out"
    echo "--- stderr:"
    cat "$work/err"
    echo "---"
}

expect_status() {
    [ "$status" -eq "$1" ] || { fail "exit status $status, expected $1"; show; }
}

# expect_out FILE(out|err) TEXT...: each TEXT is a fixed string in that stream.
expect_in() {
    stream=$1
    shift
    for text in "$@"; do
        grep -qF -- "$text" "$work/$stream" || { fail "expected in std$stream: $text"; show; }
    done
}

# expect_line STREAM REGEX: some line of the stream matches the extended regex.
expect_line() {
    grep -qE -- "$2" "$work/$1" || { fail "expected a line of std$1 matching: $2"; show; }
}

# tiny_model: a tiny synthetic checkpoint and $work/t.ini that runs it quietly.
tiny_model() {
    "$tide" --quiet mkmodel "$work/tiny" --preset tiny >/dev/null 2>&1 || fail "mkmodel"
    printf '[model]\npath = %s/tiny\n[generation]\ngen_length = 32\n[output]\nprogress = false\nstream = false\n' \
        "$work" >"$work/t.ini"
}

not_in() {
    if grep -qF -- "$2" "$work/$1"; then
        fail "did not expect in std$1: $2"
        show
    fi
}

# The rows of the plugin table: from the header to the first empty line.
plugin_rows() {
    awk '/^NAME +KIND +VERSION +ABI +STATUS +PATH$/ { on = 1; next }
         on && /^$/ { exit }
         on && !/^    / && $0 != "(no plugins found)" { print }' "$work/out"
}

# expect_refused FILE PHRASE: `tide plugins` lists bad_dir/FILE as refused,
# and the line after it (the reason) holds PHRASE.
expect_refused() {
    reason=$(awk -v p="  $bad_dir/$1" 'found { print; exit } $0 == p { found = 1 }' "$work/out")
    case $reason in
    *"$2"*) ;;
    *) fail "expected '$bad_dir/$1' refused with a reason containing: $2 (got: '$reason')"; show ;;
    esac
}

case $case_name in
help)
    run -- --help
    expect_status 0
    expect_in out "usage: tide" "commands:" "plugins" "config" "--set section.key=value" \
        "TIDE_PLUGIN_PATH" "exit codes: 0 ok, 1 runtime failure, 2 usage or configuration error" \
        "130 interrupted"
    run -- help
    expect_status 0
    expect_in out "exit codes:"
    ;;
help-all)
    # Every command (as `tide --help` lists them) and every subcommand answers
    # --help and -h wherever it appears: its usage on stdout, no complaint on
    # stderr, exit 0.
    run -- --help
    cmds=$(awk '/^commands:$/ { on = 1; next } on && /^$/ { exit } on { print $1 }' "$work/out")
    [ "$(echo "$cmds" | wc -w)" -ge 11 ] || fail "expected at least 11 commands, got: $cmds"
    for c in $cmds "trace info" "trace synth" "trace counts" "config check" "config doc" \
        "bench merge" "sim merge" \
        "trace synth out.tidetrace --layers" "config check x.ini --set"; do
        for h in --help -h; do
            # shellcheck disable=SC2086
            run -- $c $h
            expect_status 0
            expect_in out "usage: tide"
            # No complaint on stderr (a sanitizer build may add its own report).
            not_in err "error"
            not_in err "usage:"
            not_in err "unexpected"
        done
    done
    ;;
version)
    run -- --version
    expect_status 0
    expect_line out "^tide $version \\(plugin ABI [0-9]+\\)$"
    ;;
usage-errors)
    run -- frobnicate
    expect_status 2
    expect_in err "unknown command 'frobnicate'" "tide --help"
    run -- --frobnicate plugins
    expect_status 2
    expect_in err "unknown option '--frobnicate'"
    run --
    expect_status 2
    expect_in err "usage: tide"
    run -- plugins extra
    expect_status 2
    expect_in err "unexpected argument 'extra'"
    run -- config
    expect_status 2
    run -- config frob
    expect_status 2
    expect_in err "unknown subcommand 'frob'"
    run -- config check
    expect_status 2
    expect_in err "which FILE?"
    run -- config doc "$fixtures/good.ini"
    expect_status 2
    run -- config check "$fixtures/good.ini" --set
    expect_status 2
    expect_in err "--set needs a value"
    ;;
plugins)
    # Whatever real plugins this build has: a header, and every row well formed.
    real_dir=$(cd "$(dirname "$tide")" && pwd -P)/plugins
    run -- plugins
    expect_status 0
    expect_in out "searched:"
    expect_line out "^  .*/plugins$"
    expect_line out "^NAME +KIND +VERSION +ABI +STATUS +PATH$"
    plugin_rows >"$work/rows"
    if ! grep -q . "$work/rows"; then
        expect_in out "(no plugins found)"
    fi
    while read -r name kind ver abi st path; do
        case $kind in model | backend | policy | decoder) ;; *) fail "row '$name': kind '$kind'" ;; esac
        case $st in ok | unusable) ;; *) fail "row '$name': status '$st'" ;; esac
        [ "$abi" -ge 1 ] 2>/dev/null || fail "row '$name': ABI '$abi'"
        [ -n "$ver" ] || fail "row '$name': no version"
        [ -f "$path" ] || fail "row '$name': path '$path' is not a file"
        [ "$(dirname "$path")" = "$real_dir" ] || fail "row '$name': '$path' is not in $real_dir"
        case $path in */"$name".so) ;; *) fail "row '$name': file '$path' is not named after it" ;; esac
    done <"$work/rows"
    not_in out "test-good-policy"
    [ $failed -eq 0 ] || show
    ;;
plugins-bad)
    run TIDE_PLUGIN_PATH="$bad_dir" -- plugins
    expect_status 0
    expect_line out "^  $bad_dir\$"
    expect_line out "^test-good-policy +policy +0\\.0\\.1 +2 +ok +$bad_dir/test-good-policy\\.so\$"
    expect_line out "^test-good-backend +backend +0\\.0\\.1 +2 +ok +$bad_dir/test-good-backend\\.so\$"
    expect_line out "^test-dup +policy +0\\.0\\.1 +2 +ok +$bad_dir/test-dup-a\\.so\$"
    expect_line out "^test-probe-refuses +policy +0\\.0\\.1 +2 +unusable +$bad_dir/test-probe-refuses\\.so\$"
    expect_in out "    unusable here: no frobnicator on this machine (test plugin always refuses)"
    expect_in out "refused:"
    expect_refused test-bad-abi.so "ABI mismatch: plugin test-bad-abi was built for plugin ABI 3, this tide speaks ABI 2"
    expect_refused test-bad-null-entry.so "entry returned no descriptor for ABI 2"
    expect_refused test-old-abi.so "plugin test-old-abi was built for plugin ABI 1; this tide speaks ABI 2: rebuild it"
    expect_refused test-bad-desc-size.so "descriptor is 16 bytes"
    expect_refused test-bad-no-entry.so "no entry symbol 'tide_plugin_entry'"
    expect_refused test-bad-kind.so "unknown plugin kind 42"
    expect_refused test-bad-slash.so "plugin name 'test/bad-slash' contains a path separator"
    expect_refused test-bad-small-ops.so "policy ops table is"
    expect_refused test-dup-b.so "duplicate name 'test-dup': already loaded from $bad_dir/test-dup-a.so"
    # Every refused file is listed once.
    n=$(grep -c "^  $bad_dir/.*\\.so\$" "$work/out")
    [ "$n" -eq 9 ] || { fail "expected 9 refused files, got $n"; show; }
    ;;
config-check)
    run TIDE_PLUGIN_PATH="$bad_dir" -- config check "$fixtures/good.ini" --set generation.steps=24 \
        --set test-good-policy.weight=0.25
    expect_status 0
    expect_in out "; effective configuration of $fixtures/good.ini"
    expect_line out "^\\[generation\\]$"
    expect_line out "^steps = 24 +; --set$"
    expect_line out "^threshold = 0\\.9 +; good\\.ini:5$"
    expect_line out "^block_length = 32 +; default$"
    expect_line out "^plugin = test-good-policy +; good\\.ini:8$"
    expect_line out "^expert_memory = 512MiB +; good\\.ini:9$"
    expect_line out "^\\[test-good-policy\\]$"
    expect_line out "^mode = host +; good\\.ini:12$"
    expect_line out "^weight = 0\\.25 +; --set$"
    ;;
config-check-bad)
    run -- config check "$fixtures/bad.ini"
    expect_status 2
    expect_in err "bad.ini:3: [generation] threshold = '1.5': expected a number in (0,1]" \
        "bad.ini:4: unknown key 'stepz' in [generation]; did you mean 'steps'?" \
        "bad.ini: configuration is not valid"
    [ -s "$work/out" ] && { fail "expected nothing on stdout"; show; }
    # A plugin's section while its plugin is not found: the plugin and the
    # folders searched are named (a wrong TIDE_PLUGIN_PATH).
    run TIDE_PLUGIN_PATH="$work/no-plugins-here" -- config check "$fixtures/good.ini"
    expect_status 2
    expect_in err "good.ini:11: [test-good-policy]: plugin not found: no plugin named" \
        "'test-good-policy'" "$work/no-plugins-here" "TIDE_PLUGIN_PATH"
    not_in err "unknown section"
    # A section that names no plugin keeps its "did you mean".
    printf '[generaton]\nsteps = 3\n' >"$work/typo.ini"
    run -- config check "$work/typo.ini"
    expect_status 2
    expect_in err "typo.ini:1: unknown section [generaton]; did you mean [generation]?"
    # A bad --set on a good file.
    run TIDE_PLUGIN_PATH="$bad_dir" -- config check "$fixtures/good.ini" --set generation.steps=0
    expect_status 2
    expect_in err "--set generation.steps=0: [generation] steps = '0': expected an integer in [1,4096]"
    run TIDE_PLUGIN_PATH="$bad_dir" -- config check "$fixtures/good.ini" --set steps=3
    expect_status 2
    expect_in err "--set steps=3: expected section.key=value"
    run -- config check "$work/no-such.ini"
    expect_status 2
    expect_in err "cannot open $work/no-such.ini"
    ;;
config-layers)
    # Several -c files layer in order, the later winning; config check shows
    # the file and line of each value.
    printf '[generation]\nsteps = 16\nthreshold = 0.9\n' >"$work/base.ini"
    printf '[generation]\nsteps = 24\n' >"$work/over.ini"
    run -- config check -c "$work/base.ini" -c "$work/over.ini"
    expect_status 0
    expect_in out "; effective configuration of $work/base.ini, then $work/over.ini"
    expect_line out "^steps = 24 +; over\\.ini:2$"
    expect_line out "^threshold = 0\\.9 +; base\\.ini:3$"
    run -- config check "$work/base.ini" "$work/over.ini" --set generation.steps=8
    expect_status 0
    expect_line out "^steps = 8 +; --set$"
    expect_line out "^threshold = 0\\.9 +; base\\.ini:3$"
    # tide run reads every file: a bad value in the first one is reported.
    printf '[generation]\nsteps = 0\n' >"$work/bad-base.ini"
    run -- run -c "$work/bad-base.ini" -c "$work/over.ini" -p hi
    expect_status 2
    expect_in err "bad-base.ini:2: [generation] steps = '0'"
    # include = FILE: relative to the including file (not the current
    # directory), at the top or in a section; the includer's later lines win.
    mkdir -p "$work/inc/parts"
    printf 'include = parts/gen.ini\n[generation]\nthreshold = 0.7\n[policy]\ninclude = parts/pol.ini\n' \
        >"$work/inc/main.ini"
    printf '[generation]\nsteps = 20\nthreshold = 0.8\n' >"$work/inc/parts/gen.ini"
    printf '[policy]\nbudget = 3\n' >"$work/inc/parts/pol.ini"
    run -- config check "$work/inc/main.ini"
    expect_status 0
    expect_line out "^steps = 20 +; gen\\.ini:2$"
    expect_line out "^threshold = 0\\.7 +; main\\.ini:3$"
    expect_line out "^budget = 3 +; pol\\.ini:2$"
    # A missing file and a cycle name both files.
    printf '[model]\ninclude = nope.ini\n' >"$work/inc/missing.ini"
    run -- config check "$work/inc/missing.ini"
    expect_status 2
    expect_in err "missing.ini:2: include = nope.ini: cannot open $work/inc/nope.ini"
    printf 'include = b.ini\n' >"$work/inc/a.ini"
    printf 'include = a.ini\n' >"$work/inc/b.ini"
    run -- config check "$work/inc/a.ini"
    expect_status 2
    expect_in err "b.ini:1: include = a.ini: $work/inc/a.ini is already being read" \
        "include cycles are refused"
    ;;
model-create)
    # [model] create generates a checkpoint only at the path its own file
    # names (or when the command line asks); a typo'd path is an error.
    src=$(cd "$fixtures/../../.." && pwd)
    printf '[generation]\ngen_length = 32\n[output]\nprogress = false\nstream = false\n' \
        >"$work/short.ini"
    run -- run -c "$src/config/llada2-tiny.ini" -c "$work/short.ini" --set "model.path=$work/typo" \
        --ids 1,2,3
    expect_status 2
    expect_in err "[model] path = $work/typo (--set)" "--set model.create=tiny"
    [ ! -e "$work/typo" ] || fail "a checkpoint was generated at the typo'd path"
    # A later file's path is not the path the file declaring create names.
    printf '[model]\npath = %s/typo2\n' "$work" >"$work/path.ini"
    run -- run -c "$src/config/llada2-tiny.ini" -c "$work/path.ini" -c "$work/short.ini" --ids 1,2,3
    expect_status 2
    expect_in err "[model] path = $work/typo2 (path.ini:2)" "llada2-tiny.ini:8"
    [ ! -e "$work/typo2" ] || fail "a checkpoint was generated at the other file's path"
    # Asked on the command line: generated there.
    run -- run -c "$src/config/llada2-tiny.ini" -c "$work/short.ini" --set "model.path=$work/asked" \
        --set model.create=tiny --ids 1,2,3 --print-ids
    expect_status 0
    [ -f "$work/asked/config.json" ] || fail "no checkpoint at $work/asked"
    # The path named by the file that declares create.
    printf '[model]\npath = %s/own\ncreate = tiny\n' "$work" >"$work/own.ini"
    run -- run -c "$work/own.ini" -c "$work/short.ini" --ids 1,2,3 --print-ids
    expect_status 0
    [ -f "$work/own/config.json" ] || fail "no checkpoint at $work/own"
    # Processes started together on a missing path (a sharded sweep): each
    # generates into a folder of its own, the first rename wins, and every
    # one runs on a whole checkpoint. Before, a process could find the
    # folder half-written (tokenizer.json missing): timing-dependent, so
    # four rounds of six processes.
    raced=0
    for round in 1 2 3 4; do
        printf '[model]\npath = %s/m%s/raced\ncreate = tiny\n' "$work" "$round" >"$work/race.ini"
        for k in 1 2 3 4 5 6; do
            { "$tide" --quiet run -c "$work/race.ini" -c "$work/short.ini" --ids 1,2,3 --print-ids \
                >"$work/race$k.out" 2>"$work/race$k.err" || echo "$k" >>"$work/race.failed"; } &
        done
        wait
        [ -f "$work/m$round/raced/model.safetensors" ] || fail "no checkpoint at $work/m$round/raced"
        ls -d "$work/m$round"/raced.tmp-* >/dev/null 2>&1 && fail "a temporary checkpoint folder was left"
    done
    if [ -s "$work/race.failed" ]; then
        fail "$(wc -l <"$work/race.failed") of 24 concurrent runs failed on a missing [model] create path"
        cat "$work"/race*.err
    fi
    ;;
budget)
    # A budget above the experts per layer (32 in the tiny model) is an
    # error naming both and the way to ask for no offload, in run and bench.
    "$tide" --quiet mkmodel "$work/tiny" --preset tiny >/dev/null 2>&1 || fail "mkmodel"
    printf '[model]\npath = %s/tiny\n[generation]\ngen_length = 32\n[output]\nprogress = false\nstream = false\n' \
        "$work" >"$work/t.ini"
    printf 'hello\n' >"$work/prompts.txt"
    run -- run -c "$work/t.ini" --set policy.budget=64 --ids 1,2,3
    expect_status 2
    expect_in err "[policy] budget = 64 (--set): the model has 32 experts per MoE layer" \
        "budget = -1"
    run -- bench -c "$work/t.ini" --prompts "$work/prompts.txt" --policies lru --budgets 4,64 \
        --out "$work/b"
    expect_status 2
    expect_in err "[bench] budgets: 64 is more than the model's 32 experts per MoE layer" \
        "for no offload use 'all'"
    run -- bench -c "$work/t.ini" --prompts "$work/prompts.txt" --policies lru --budgets eight \
        --out "$work/b"
    expect_status 2
    expect_in err "'eight' is not a valid value (expected experts per MoE layer" "'all'"
    # No offload as before: budget -1, 'all', and the experts per layer.
    run -- run -c "$work/t.ini" --set policy.budget=-1 --ids 1,2,3 --print-ids
    expect_status 0
    run -- bench -c "$work/t.ini" --prompts "$work/prompts.txt" --policies lru --budgets all,32 \
        --set bench.baseline=false --out "$work/b"
    expect_status 0
    expect_line out "^\\(no offload\\) +- +32 "
    # --out creates missing parent folders.
    run -- bench -c "$work/t.ini" --prompts "$work/prompts.txt" --policies lru --budgets 4 \
        --set bench.baseline=false --out "$work/new/deeper/runs"
    expect_status 0
    ls "$work"/new/deeper/runs/*/results.csv >/dev/null 2>&1 || fail "--out a/b/c: no results.csv"
    ;;
mkmodel)
    # The checkpoints tide writes hold every key their reader looks for, so
    # loading them logs no "is missing" (the demo's own checkpoint).
    for preset in "model-llada2 tiny" "model-llada-moe tiny-moe"; do
        set -- $preset
        run -- mkmodel "$work/$2" --plugin "$1" --preset "$2"
        expect_status 0
        run -- run --set "model.plugin=$1" --set "model.path=$work/$2" --set generation.gen_length=32 \
            --set output.progress=false --ids 1,2,3 --print-ids
        expect_status 0
        not_in err "is missing"
    done
    grep -q '"use_qk_norm": true' "$work/tiny/config.json" || fail "no use_qk_norm in config.json"
    ;;
trace-tokens)
    # tide trace info (and so sim's tok/s) counts generated tokens as tide
    # run does: up to gen_length, not the tail of the last block past it.
    "$tide" --quiet mkmodel "$work/tiny" --preset tiny >/dev/null 2>&1 || fail "mkmodel"
    for len in 40 64; do
        run -- run --set "model.path=$work/tiny" --set generation.gen_length=$len \
            --set output.progress=false --set "output.trace=$work/t$len.trc" --ids 5,6,7,8,9
        expect_status 0
        want=$(sed -n 's/.*done: \([0-9]*\) tokens.*/\1/p' "$work/err")
        run -- trace info "$work/t$len.trc"
        expect_status 0
        expect_line out "tokens generated $want \\(up to gen_length"
    done
    ;;
flags)
    # Unknown flags get a "did you mean"; bench and sim take each other's
    # spellings of the sweep flags.
    run -- run --promt hi
    expect_status 2
    expect_in err "unexpected argument '--promt'; did you mean '--prompt'?"
    run -- bench --polices lru
    expect_status 2
    expect_in err "unexpected argument '--polices'; did you mean '--policies'?"
    run -- sim --trace x.trc --intervl 4
    expect_status 2
    expect_in err "unknown argument '--intervl'; did you mean '--interval'?"
    "$tide" --quiet mkmodel "$work/tiny" --preset tiny >/dev/null 2>&1 || fail "mkmodel"
    printf '[model]\npath = %s/tiny\n[generation]\ngen_length = 32\n[output]\nprogress = false\nstream = false\n' \
        "$work" >"$work/t.ini"
    printf 'hello\n' >"$work/prompts.txt"
    run -- run -c "$work/t.ini" --set "output.trace=$work/t.trc" --ids 1,2,3
    expect_status 0
    # bench: the singular spellings reach [bench] (the budget check shows it).
    run -- bench -c "$work/t.ini" --prompts "$work/prompts.txt" --policy lru --budget 33 \
        --interval 2 --out "$work/b"
    expect_status 2
    expect_in err "[bench] budgets: 33 is more than"
    # sim: the plural spellings.
    run -- sim --trace "$work/t.trc" --policies lru,tide --budgets 4,8 --intervals 1,2 --no-hindsight
    expect_status 0
    expect_line out "^policy-lru +- +8 "
    expect_line out "^policy-tide +2 +4 "
    ;;
sweep)
    # --sweep SECTION.KEY=v1,v2: any key, the product with the policy grid,
    # a CSV column per key, recorded in the manifest; shards merge back.
    "$tide" --quiet mkmodel "$work/tiny" --preset tiny >/dev/null 2>&1 || fail "mkmodel"
    printf '[model]\npath = %s/tiny\n[generation]\ngen_length = 32\n[output]\nprogress = false\nstream = false\n' \
        "$work" >"$work/t.ini"
    printf 'hello\n' >"$work/prompts.txt"
    sweep="--prompts $work/prompts.txt --policies lru,lfu --budgets 4 --sweep generation.threshold=0.9,0.5 --sweep policy-lfu.decay=1,0.5"
    # shellcheck disable=SC2086
    run -- bench -c "$work/t.ini" $sweep --out "$work/all"
    expect_status 0
    csv=$(ls "$work"/all/*/results.csv)
    [ "$(head -n 1 "$csv" | awk -F, '{ print $(NF-1) "," $NF }')" = "generation.threshold,policy-lfu.decay" ] ||
        fail "results.csv header: $(head -n 1 "$csv")"
    # A baseline and two policies per point, 4 points.
    [ "$(grep -c '^policy-lfu,.*,0\.5,0\.5$' "$csv")" -eq 1 ] || fail "no lfu row at 0.5,0.5: $(cat "$csv")"
    [ "$(wc -l <"$csv")" -eq 13 ] || fail "expected 12 rows: $(cat "$csv")"
    grep -q '"key": "policy-lfu.decay"' "$(dirname "$csv")/manifest.json" || fail "sweep not in the manifest"
    for k in 0 1 2; do
        # shellcheck disable=SC2086
        run -- bench -c "$work/t.ini" $sweep --shard $k/3 --out "$work/shards"
        expect_status 0
    done
    run -- bench merge "$work/shards" --out "$work/merged"
    expect_status 0
    cut -d, -f1-5,17- "$csv" >"$work/a"
    cut -d, -f1-5,17- "$work/merged/results.csv" >"$work/b"
    cmp -s "$work/a" "$work/b" || fail "merged shards differ from one run: $(diff "$work/a" "$work/b")"
    # Values are checked by the option's type and range, naming the key.
    run -- bench -c "$work/t.ini" --sweep generation.threshold=0.9,2 --out "$work/x"
    expect_status 2
    expect_in err "generation.threshold=2" "expected a number in (0,1]"
    run -- bench -c "$work/t.ini" --sweep policy-lru.decay=1 --out "$work/x"
    expect_status 2
    expect_in err "unknown key 'decay' in [policy-lru]"
    run -- bench -c "$work/t.ini" --sweep generation.threshold --out "$work/x"
    expect_status 2
    expect_in err "expected SECTION.KEY=v1,v2"
    run -- bench -c "$work/t.ini" --sweep bench.repeats=1,2 --out "$work/x"
    expect_status 2
    expect_in err "[bench] describes the command's own grid"
    # tide sim: the same flag, a CSV column per key.
    run -- run -c "$work/t.ini" --set "output.trace=$work/t.trc" --ids 1,2,3
    expect_status 0
    run -- sim --trace "$work/t.trc" --policies lfu,lru --budgets 4 --sweep policy-lfu.decay=1,0.5 \
        --csv "$work/s.csv"
    expect_status 0
    expect_in out "sweep point 2 of 2: policy-lfu.decay=0.5"
    [ "$(head -n 1 "$work/s.csv" | awk -F, '{ print $NF }')" = "policy-lfu.decay" ] ||
        fail "sim CSV header: $(head -n 1 "$work/s.csv")"
    [ "$(grep -c '^policy-lfu,.*,0\.5$' "$work/s.csv")" -eq 1 ] || fail "sim CSV: $(cat "$work/s.csv")"
    run -- sim --trace "$work/t.trc" --sweep policy-lfu.decay=2
    expect_status 2
    expect_in err "[policy-lfu] decay = '2': expected a number in [0,1]"
    ;;
bench-preflight)
    # Issue 38 item 2: every grid point is checked before the first run and
    # all problems are listed at once; nothing runs, no folder is written.
    tiny_model
    printf 'hello\n' >"$work/prompts.txt"
    # Two planted problems: policy-cost without a profile, and policy-tide's
    # interval = auto with a missing profile file, at the second sweep point.
    run -- bench -c "$work/t.ini" --prompts "$work/prompts.txt" --policies lru,cost,tide \
        --budgets 8 --intervals auto --sweep generation.threshold=0.9,0.5 \
        --set "policy-tide.profile=$work/missing.ini" --out "$work/pf"
    expect_status 2
    expect_in err "policy-cost: needs the machine's modelled costs" "$work/missing.ini" \
        "preflight: policy-cost cannot start" "preflight: policy-tide cannot start" \
        "preflight found 2 problems"
    [ ! -e "$work/pf" ] || fail "preflight wrote $(ls -R "$work/pf")"
    [ ! -s "$work/out" ] || fail "preflight printed a table: $(cat "$work/out")"
    # A profile for another expert shape is refused naming --scale-profile.
    run -- bench -c "$work/t.ini" --prompts "$work/prompts.txt" --policies cost --budgets 8 \
        --set policy.profile=config/profiles/h100-pcie5.ini --out "$work/pf"
    expect_status 2
    expect_in err "pass --scale-profile" "preflight found"
    ;;
bench-scale)
    # Issue 38 items 2 and 5: --scale-profile in bench reaches every policy,
    # policy-tide's interval = auto included (and so in tide sim).
    tiny_model
    printf 'hello\n' >"$work/prompts.txt"
    run -- run -c "$work/t.ini" --set "output.trace=$work/t.trc" --ids 1,2,3
    expect_status 0
    run -- sim --trace "$work/t.trc" --policies tide,cost --budgets 8 --interval auto \
        --profile config/profiles/h100-pcie5.ini --scale-profile --no-hindsight
    expect_status 0
    expect_line out "^policy-tide +auto +8 "
    expect_in err "interval = auto uses the core's costs"
    run -- bench -c "$work/t.ini" --prompts "$work/prompts.txt" --policies tide,cost,hybrid,warm \
        --budgets 8 --intervals 4,auto --set policy.profile=config/profiles/h100-pcie5.ini \
        --scale-profile --out "$work/b"
    expect_status 0
    expect_line out "^policy-tide +auto +8 "
    expect_line out "^policy-cost +- +8 "
    expect_line out "^policy-warm +- +8 "
    ;;
bench-tables)
    # Issue 38 items 7, 8 and 13: rows name their repeat and sweep point, a
    # summary with median [min, max], the winner with its margin or a tie,
    # -o md|json|csv, --warmup, and the baseline at every batch size.
    tiny_model
    printf 'hello\nworld\n' >"$work/prompts.txt"
    grid="--prompts $work/prompts.txt --policies lru,lfu --budgets 8 --repeats 2 --sweep generation.threshold=0.9,0.5"
    # shellcheck disable=SC2086
    run -- bench -c "$work/t.ini" $grid --warmup 1 --out "$work/t"
    expect_status 0
    expect_line out "^policy-lru +- +8 +1 +2 .* generation.threshold=0.5$"
    expect_line out "^summary: tok/s median \[min, max\] over 2 repeats"
    expect_line out "^policy-lfu +- +8 +1 +[0-9.]+ \[ *[0-9.]+, +[0-9.]+\]  generation.threshold=0.9$"
    expect_line out "^budget 8, batch 1, generation.threshold=0.9: (policy-l[rf]u wins, [0-9.]+% faster than policy-l[rf]u|a tie between policy-l[rf]u and policy-l[rf]u)"
    # shellcheck disable=SC2086
    run -- bench -c "$work/t.ini" $grid --batch 1,2 -o csv --out "$work/t"
    expect_status 0
    expect_line out "^policy,interval,budget,batch,repeat,.*,generation.threshold$"
    expect_line out "^\(no offload\),-,32,2,1,"
    expect_line out "^# budget 8, batch 2, generation.threshold=0.5: "
    # shellcheck disable=SC2086
    run -- bench -c "$work/t.ini" $grid -o md --out "$work/t"
    expect_status 0
    expect_line out "^\| policy-lfu \| - \| 8 \| 1 \| 2 \| "
    expect_line out "^\| policy \| interval \| budget \| batch \| sweep point \| tok/s median"
    # shellcheck disable=SC2086
    run -- bench -c "$work/t.ini" $grid -o json --out "$work/t"
    expect_status 0
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["rows"]) == 12, d; assert len(d["winners"]) == 2; w=d["winners"][0]; assert "margin_percent" in w and "tie" in w; assert d["rows"][3]["sweep_point"] == {"generation.threshold": "0.9"}' "$work/out" ||
        fail "-o json: $(cat "$work/out")"
    run -- bench -c "$work/t.ini" $grid -o yaml --out "$work/t"
    expect_status 2
    expect_in err "expected text, md, json or csv"
    # shellcheck disable=SC2086
    run -- bench -c "$work/t.ini" $grid --warmup x --out "$work/t"
    expect_status 2
    expect_in err "--warmup x: expected a number of generations from 0 to 1000"
    ;;
sim-preflight)
    # Issue 38 item 2 for tide sim: every policy of the grid starts at every
    # budget, interval and sweep point before anything is replayed; all the
    # problems are listed, nothing is printed on stdout.
    tiny_model
    run -- run -c "$work/t.ini" --set "output.trace=$work/t.trc" --ids 1,2,3
    expect_status 0
    run -- sim --trace "$work/t.trc" --policies lru,cost,tide --budgets 4,8 --interval 2,auto \
        --set "policy-tide.profile=$work/missing.ini" --no-hindsight
    expect_status 2
    expect_in err "preflight: policy-cost cannot start at budget 4" \
        "preflight: policy-tide cannot start at budget 4, interval auto" \
        "preflight found 2 problems" "nothing was replayed"
    [ ! -s "$work/out" ] || fail "preflight printed: $(cat "$work/out")"
    ;;
flag-hints)
    # Issue 38 item 6: a did-you-mean for the flags of every command, from
    # the command's own usage, and for subcommands.
    for c in "mkmodel $work/x --presett tiny|--preset" "quantize a b --expert q8_0|--experts" \
        "serve --prot 9|--port" "forward --idss 1|--ids" "trace infoo x|info" \
        "trace info x --max-distanse 2|--max-distance" "config chek x|check" \
        "tokenize --modell x|--model" "bench plot --outt x|--out" "bench merge --outt x|--out" \
        "profile x.ini --hiden 8|--hidden"; do
        args=${c%|*} want=${c#*|}
        # shellcheck disable=SC2086
        run -- $args
        expect_status 2
        expect_in err "did you mean '$want'"
    done
    ;;
layer-budgets-warn)
    # Issue 38 item 8: --layer-budgets warns when its allocation is not
    # better than the uniform one.
    tiny_model
    run -- run -c "$work/t.ini" --set "output.trace=$work/t.trc" --ids 1,2,3
    expect_status 0
    run -- sim --trace "$work/t.trc" --policies tide --budgets 2 --intervals 1,2,4 \
        --profile config/profiles/h100-pcie5.ini --scale-profile --layer-budgets --no-hindsight
    expect_status 0
    expect_in err "--layer-budgets: the unequal allocation for budget 2" "keep the uniform budget"
    ;;
repeats)
    # --repeats N: a row per repeat, and summary.csv with median, min and max
    # per configuration; shards merge both.
    "$tide" --quiet mkmodel "$work/tiny" --preset tiny >/dev/null 2>&1 || fail "mkmodel"
    printf '[model]\npath = %s/tiny\n[generation]\ngen_length = 32\n[output]\nprogress = false\nstream = false\n' \
        "$work" >"$work/t.ini"
    printf 'hello\n' >"$work/prompts.txt"
    for k in 0 1; do
        run -- bench -c "$work/t.ini" --prompts "$work/prompts.txt" --policies lru --budgets 4 \
            --batch 1,2 --repeats 3 --shard $k/2 --out "$work/r"
        expect_status 0
    done
    run -- bench merge "$work/r" --out "$work/m"
    expect_status 0
    csv="$work/m/results.csv"
    [ "$(head -n 1 "$csv" | awk -F, '{ print $NF }')" = "repeat" ] || fail "no repeat column: $(head -n 1 "$csv")"
    [ "$(grep -c '^policy-lru,.*,2,[012]$' "$csv")" -eq 3 ] || fail "batch 2: not 3 rows: $(cat "$csv")"
    # The no-offload baseline runs at every batch size (issue 38 item 13).
    [ "$(grep -c '^(no offload),.*,2,[012]$' "$csv")" -eq 3 ] || fail "no batch-2 baseline: $(cat "$csv")"
    [ "$(wc -l <"$csv")" -eq 13 ] || fail "expected 12 rows: $(cat "$csv")"
    sum="$work/m/summary.csv"
    expect_header="policy,interval,budget,batch,repeats,seconds_median,seconds_min,seconds_max,tokens_per_second_median,tokens_per_second_min,tokens_per_second_max"
    [ "$(head -n 1 "$sum")" = "$expect_header" ] || fail "summary.csv header: $(head -n 1 "$sum")"
    [ "$(wc -l <"$sum")" -eq 5 ] || fail "expected 4 summary lines: $(cat "$sum")"
    grep -q '^policy-lru,-,4,2,3,' "$sum" || fail "no batch-2 summary: $(cat "$sum")"
    ;;
config-doc)
    run -- config doc
    expect_status 0
    [ "$(head -n 1 "$work/out")" = "# TIDE configuration reference" ] ||
        { fail "first line is not the title"; show; }
    expect_in out "## [model]" "## [backend]" "## [policy]" "## [generation]" "## [output]" \
        "| \`steps\` | int in [1,4096] | \`32\` | denoising steps per block, capped at"
    not_in out "test-good-policy"
    run TIDE_PLUGIN_PATH="$bad_dir" -- config doc
    expect_status 0
    expect_in out "## [test-good-policy]" "Options of the plugin \`test-good-policy\`." \
        "| \`mode\` | enum: keep/host | \`keep\` | what the test policy does |" \
        "## [test-good-backend]" "No options."
    ;;
plot)
    # tide sim --plot: log2 ticks over intervals 1..32, the oracle drawn as a
    # bound, heat-map ticks, --plot-series; tide bench plot: error bars from
    # repeats, the baseline as a bound, a missing column named with the file.
    profiles=$fixtures/../../../config/profiles
    "$tide" --quiet trace synth "$work/syn.trc" --layers 2 --experts 32 --top-k 4 --hidden 64 \
        --inter 32 --blocks 2 --seed 3 >/dev/null 2>&1 || fail "trace synth"
    ticks() { # the labels of the <g class="CLASS"> group of an SVG, on one line
        sed -n "/<g class=\"$2\">/,/<\/g>/p" "$1" | sed -n 's/.*>\([^<]*\)<\/text>.*/\1/p' | tr '\n' ' '
    }
    sim="sim --trace $work/syn.trc --profile $profiles/h100-pcie5.ini --scale-profile --budget 4,8 --interval 1,2,4,8,16,32 --policy tide,lru,lfu"
    # shellcheck disable=SC2086
    run -- $sim --plot "$work/p1"
    expect_status 0
    [ "$(ticks "$work/p1/interval-b4.svg" tick-x)" = "1 2 4 8 16 32 " ] ||
        fail "interval axis ticks: '$(ticks "$work/p1/interval-b4.svg" tick-x)'"
    grep -q 'log2 scale' "$work/p1/interval-b4.svg" || fail "interval axis not log2"
    grep -A3 '<g class="bound">' "$work/p1/interval-b4.svg" | grep -q 'oracle (bound)' ||
        fail "the oracle is not drawn as a bound"
    grep -A2 '<g class="series">' "$work/p1/interval-b4.svg" | grep -q '#666666' &&
        fail "a policy is drawn in the bounds' grey"
    [ -n "$(ticks "$work/p1/heatmap-layer00.svg" tick-x)" ] || fail "heat map: no x ticks"
    [ -n "$(ticks "$work/p1/heatmap-layer00.svg" tick-y)" ] || fail "heat map: no y ticks"
    # shellcheck disable=SC2086
    run -- $sim --plot "$work/p2" --plot-series tide,lru
    expect_status 0
    for f in "$work/p2/hitrate-budget.svg" "$work/p2/interval-b8.svg"; do
        grep -q '>policy-tide<' "$f" && grep -q '>policy-lru<' "$f" || fail "$f lacks a chosen series"
        grep -q 'policy-lfu\|oracle' "$f" && fail "$f draws a series not chosen"
    done
    # shellcheck disable=SC2086
    run -- $sim --plot "$work/p3" --plot-series tide,nosuch
    expect_status 2
    expect_in err "--plot-series: 'nosuch' is none of" "policy-lfu" "oracle"
    run -- sim --trace "$work/syn.trc" --plot-series tide
    expect_status 2
    expect_in err "--plot-series chooses what --plot DIR"
    # tide bench plot.
    "$tide" --quiet mkmodel "$work/tiny" --preset tiny >/dev/null 2>&1 || fail "mkmodel"
    printf '[model]\npath = %s/tiny\n[generation]\ngen_length = 32\n[output]\nprogress = false\nstream = false\n' \
        "$work" >"$work/t.ini"
    printf 'hello\n' >"$work/prompts.txt"
    run -- bench -c "$work/t.ini" --prompts "$work/prompts.txt" --policies tide,lru --budgets 4,8 \
        --intervals 1,4 --repeats 2 --out "$work/b"
    expect_status 0
    run -- bench plot "$work/b"
    expect_status 0
    expect_in out "6 plots of"
    d=$(dirname "$(ls "$work"/b/*/results.csv)")
    for f in time-budget tokps-budget hitrate-budget time-interval tokps-interval hitrate-interval; do
        [ -s "$d/plots/$f.svg" ] || fail "no $f.svg"
    done
    grep -q 'class="errorbar"' "$d/plots/time-budget.svg" || fail "no error bars from repeats"
    grep -A3 '<g class="bound">' "$d/plots/tokps-budget.svg" | grep -q '>no offload<' ||
        fail "the baseline is not a bound"
    [ "$(ticks "$d/plots/time-interval.svg" tick-x)" = "1 2 4 " ] ||
        fail "interval ticks: '$(ticks "$d/plots/time-interval.svg" tick-x)'"
    grep -q '>policy-tide b4<' "$d/plots/time-interval.svg" || fail "no policy-tide b4 line"
    run -- bench plot "$d/results.csv" --out "$work/q"
    expect_status 0
    [ -s "$work/q/time-budget.svg" ] || fail "--out: no time-budget.svg"
    # Columns are read by name: a missing one is named with the file.
    cut -d, -f1-6,8- "$d/results.csv" >"$work/nohit.csv"
    run -- bench plot "$work/nohit.csv" --out "$work/q2"
    expect_status 1
    expect_in err "$work/nohit.csv: no column 'hit_rate'"
    run -- bench plot "$work/none"
    expect_status 1
    expect_in err "$work/none"
    ;;
openmp-spin)
    # The OpenMP idle-thread default follows the machine at start: with
    # another task computing, the short spin; the user's setting always wins.
    src=$(cd "$fixtures/../../.." && pwd)
    printf '[model]\npath = %s/m\ncreate = tiny\n[generation]\ngen_length = 32\n[output]\nprogress = false\nstream = false\n' \
        "$work" >"$work/spin.ini"
    unset GOMP_SPINCOUNT OMP_WAIT_POLICY
    run GOMP_SPINCOUNT=5 -- run -c "$src/config/llada2-tiny.ini" -c "$work/spin.ini" --ids 1,2,3
    expect_status 0
    expect_in err "OpenMP idle threads: as OMP_WAIT_POLICY / GOMP_SPINCOUNT say"
    sh -c 'while :; do :; done' &
    busy=$!
    run -- run -c "$src/config/llada2-tiny.ini" -c "$work/spin.ini" --ids 1,2,3
    kill "$busy"
    expect_status 0
    expect_in err "GOMP_SPINCOUNT=1000: other tasks were running at start"
    not_in err "GOMP_SPINCOUNT=300000"
    ;;
*)
    echo "cli_test.sh: unknown case '$case_name'"
    exit 2
    ;;
esac
[ $failed -eq 0 ] && echo "ok: $case_name"
exit $failed
