#!/bin/sh
# The runner of the documentation's examples must fail, naming the file and
# line, on a runnable block whose command fails, on one that runs past its
# timeout, and on a marker it cannot honour; and pass the blocks that work.
# usage: detect_broken_block.sh PYTHON RUN_DOC_BLOCKS TIDE SOURCE_DIR
set -u
py=$1 runner=$2 tide=$3 src=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/tide-doc-broken.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
failed=0

# check NAME WANT_STATUS TEXT...: run the runner on $work/NAME.md; its exit
# status must be WANT_STATUS and its output must hold each TEXT.
check() {
    name=$1 want=$2
    shift 2
    "$py" "$runner" --tide "$tide" --source "$src" "$work/$name.md" >"$work/out" 2>&1
    status=$?
    ok=1
    [ "$status" -eq "$want" ] || { echo "FAIL ($name): exit $status, expected $want"; ok=0; }
    for text in "$@"; do
        grep -qF -- "$text" "$work/out" || { echo "FAIL ($name): expected: $text"; ok=0; }
    done
    if [ "$ok" = 1 ]; then
        echo "ok: $name"
    else
        failed=1
        cat "$work/out"
    fi
}

# Line 7 is the failing command (`tide run` refuses the unknown flag), line
# 20 the failing line of Python; the block between them must not be skipped.
cat >"$work/broken.md" <<'EOF'
# Planted

<!-- runnable -->
```sh
tide --version
echo first
tide run -c config/llada2-tiny.ini --no-such-flag -p "Hi"
echo never
```

<!-- runnable -->
```bash
echo second block runs
```

<!-- runnable -->
```python
import os
print(os.path.isdir("config"))
open("no-such-file.txt")
```
EOF
check broken 1 "$work/broken.md:7: FAILED, exit 2: tide run -c config/llada2-tiny.ini --no-such-flag" \
    "--no-such-flag" "$work/broken.md:12: ok" \
    "$work/broken.md:20: FAILED, exit 1: FileNotFoundError:" "2 runnable block(s) failed"

cat >"$work/slow.md" <<'EOF'
<!-- runnable: timeout=1 -->
```sh
sleep 30
```
EOF
check slow 1 "$work/slow.md:3: FAILED, timed out after"

# A `continue` block runs where the previous one left its files.
cat >"$work/good.md" <<'EOF'
<!-- runnable: setup=tiny sub=/tmp/x=>x -->
```sh
tide inspect models/llada2-tiny > /tmp/x.txt
```
Unmarked:
```sh
false
```
<!-- runnable: continue -->
```sh
grep -q "4 layers" x.txt
```
EOF
check good 0 "$work/good.md:2: ok" "$work/good.md:10: ok" "2 runnable blocks, 0 failed; 1 sh/python blocks unmarked"

cat >"$work/misplaced.md" <<'EOF'
<!-- runnable -->
```c
int main(void) { return 0; }
```

<!-- runnable: timeout=5 colour=blue -->
```sh
true
```
<!-- runnable -->

```sh
true
```
EOF
check misplaced 1 "$work/misplaced.md:1: runnable marker before a \`\`\`c block" \
    "$work/misplaced.md:6: runnable option 'colour=blue': unknown option" \
    "$work/misplaced.md:10: runnable marker must be the line right before the fence"

exit $failed
