#!/bin/sh
# Compare two raw little-endian float32 files (tide forward --out) value by
# value: pass when every |a - b| <= TOL * max(1, max |b|) and all are finite.
# Prints one line with the figures.
# usage: cmp_logits.sh A B TOL WHAT
set -u
a=$1 b=$2 tol=$3 what=$4
if [ ! -s "$a" ] || [ ! -s "$b" ]; then
    echo "$what: missing logits ($a, $b)"
    exit 1
fi
if [ "$(wc -c <"$a")" -ne "$(wc -c <"$b")" ]; then
    echo "$what: $a and $b differ in size"
    exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tide-cmp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
od -An -v -tf4 -w4 "$a" >"$tmp/a"
od -An -v -tf4 -w4 "$b" >"$tmp/b"
paste "$tmp/a" "$tmp/b" | awk -v tol="$tol" -v what="$what" '
    $1 ~ /[nN]a[nN]|[iI]nf/ || $2 ~ /[nN]a[nN]|[iI]nf/ { bad++; next }
    { d = $1 - $2; if (d < 0) d = -d; if (d > md) { md = d; at = NR - 1 }
      m = $2 < 0 ? -$2 : $2; if (m > mx) mx = m; n++ }
    END {
        lim = tol * (mx > 1 ? mx : 1)
        printf "%s: %d values, max |diff| %.3g at %d, max |logit| %.3g, limit %.3g%s\n",
               what, n, md, at, mx, lim, bad ? ", NON-FINITE VALUES" : ""
        exit !(n > 0 && !bad && md <= lim)
    }'
