#!/bin/bash
# test_cli.sh - the `ember` tool end to end: help, usage errors and exit codes,
# put/get/delete/dump round trips (text, hex, empty and binary values from a file),
# verify on good data and on a damaged hot.log, checkpoints, compaction, recovery
# info, read-only opens.
#
#   test_cli.sh PATH_TO_EMBER
#
# Exits 0 when every check passed, 1 at the first failure (with what was expected).
set -u
EMBER=${1:?usage: test_cli.sh PATH_TO_EMBER}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ember-cli-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
D=$TMP/store
OUT=$TMP/out
ERR=$TMP/err
n=0

fail() {
	echo "FAIL: $*"
	echo "--- stdout:"; cat "$OUT"
	echo "--- stderr:"; cat "$ERR"
	exit 1
}

# run WANT_EXIT ARGS...: run the tool, check its exit code
run() {
	local want=$1; shift
	"$EMBER" "$@" >"$OUT" 2>"$ERR"
	local got=$?
	n=$((n + 1))
	[ "$got" = "$want" ] || fail "ember $* exited $got, want $want"
}

# out_is TEXT / out_has TEXT / err_has TEXT
out_is() { [ "$(cat "$OUT")" = "$1" ] || fail "stdout is not '$1'"; }
out_has() { grep -qF -- "$1" "$OUT" || fail "stdout lacks '$1'"; }
err_has() { grep -qF -- "$1" "$ERR" || fail "stderr lacks '$1'"; }

# ---- help and usage ----
run 0 --help
for c in stats verify dump get put delete checkpoint checkpoints compact info; do
	out_has "  $c "
done
out_has "Exit codes"
for c in stats verify dump get put delete checkpoint checkpoints compact info; do
	run 0 "$c" --help
	out_has "usage: ember [--readonly] DIR $c"
	out_has "Exit:"
done
run 0 "$D" dump --help
out_has "--keys-only"
run 2
err_has "usage: ember"
run 2 "$D"
err_has "missing COMMAND"
run 2 "$D" frobnicate
err_has "unknown command 'frobnicate'"
err_has "usage: ember"
run 2 --bogus "$D" stats
err_has "unknown option --bogus"
run 2 stats "$D"
err_has "DIR comes before the command"

# ---- no store yet: nothing is created without --create ----
run 3 "$D" stats
err_has "no Ember store here"
[ ! -e "$D" ] || fail "a store was created without --create"
run 2 --create --readonly "$D" stats

# ---- put / get / delete ----
run 0 --create "$D" put hello world
run 0 "$D" get hello
out_is "world"
run 0 "$D" put hello again
run 0 "$D" get hello
out_is "again"
run 0 "$D" put 0x00ff 0x0102
run 0 "$D" get 0x00FF
out_is "0x0102"
run 0 "$D" get --text 0x00ff
out_is '\x01\x02'
run 0 "$D" put empty 0x
run 0 "$D" get empty
out_is "0x"
run 0 "$D" put 0x7a6b hex-key
run 0 "$D" get zk
out_is "hex-key"
head -c 70000 /dev/urandom >"$TMP/blob"
run 0 "$D" put blob "@$TMP/blob"
run 0 "$D" get --raw blob
cmp -s "$OUT" "$TMP/blob" || fail "get --raw blob differs from the file put"
printf 'from stdin' | "$EMBER" "$D" put piped @- >"$OUT" 2>"$ERR" || fail "put @-"
run 0 "$D" get piped
out_is "from stdin"
run 0 "$D" put -- --dash 0x4061
run 0 "$D" get -- --dash
out_is "0x4061"
run 0 "$D" dump --keys-only
grep -qx '0x2d2d64617368' "$OUT" || fail "a key starting with - is not dumped as hex"
run 0 "$D" delete 0x2d2d64617368
run 0 "$D" put gone soon
run 0 "$D" delete gone
run 1 "$D" get gone
err_has "not found"
run 0 "$D" delete never-existed

# bad arguments
run 2 "$D" get
err_has "missing argument"
run 2 "$D" get a b
err_has "unexpected argument"
run 2 "$D" put onlykey
run 2 "$D" get 0x123
err_has "odd number of hex digits"
run 2 "$D" put k 0xzz
err_has "not a hex digit"
run 2 "$D" get ""
run 2 "$D" put k "@$TMP/does-not-exist"
err_has "does-not-exist"
run 2 "$D" dump --limit
err_has "--limit needs a number"
for bad in " -1" "-1" "+1" " 5" "1k" "18446744073709551616" "0x10"; do
	run 2 "$D" dump --limit "$bad"
	err_has "--limit needs a number"
done
run 2 "$D" dump --frob
err_has "unknown option --frob"
run 2 "$D" compact --hard

# ---- dump ----
run 0 "$D" dump
sort "$OUT" >"$TMP/dump"
blobhex=0x$(od -An -v -tx1 "$TMP/blob" | tr -d ' \n')
printf '%s\t%s\n' 0x00ff 0x0102 blob "$blobhex" empty 0x hello again piped "from stdin" zk hex-key |
	sort >"$TMP/want"
cmp -s "$TMP/dump" "$TMP/want" || { diff "$TMP/dump" "$TMP/want" | head -5; fail "dump differs"; }
run 0 "$D" dump --keys-only
[ "$(sort "$OUT" | tr '\n' ' ')" = "0x00ff blob empty hello piped zk " ] || fail "dump --keys-only"
run 0 "$D" dump --limit 2
[ "$(wc -l <"$OUT")" = 2 ] || fail "dump --limit 2 printed $(wc -l <"$OUT") lines"
run 0 "$D" dump --limit 0
out_is ""
run 0 "$D" dump --hex --keys-only
grep -q '^0x68656c6c6f$' "$OUT" || fail "dump --hex: hello"
# a backslash is printable: printed as it is, so it reads back as the same bytes
run 0 "$D" put 'back\slash' 'c:\dir'
run 0 "$D" get 'back\slash'
out_is 'c:\dir'
run 0 "$D" dump --keys-only
grep -qxF 'back\slash' "$OUT" || fail "dump of a key with a backslash"
run 0 "$D" get --text 'back\slash'
out_is 'c:\\dir'
# every key as dumped can be given back to get
run 0 "$D" dump --keys-only
while read -r k; do
	"$EMBER" "$D" get "$k" >/dev/null 2>&1 || fail "get of dumped key $k"
done <"$TMP/out"
run 0 "$D" delete 'back\slash'

# ---- verify, stats, checkpoints, compact, info ----
run 0 "$D" verify
out_has "errors   0"
out_has "ok"
run 0 "$D" stats
out_has "hot log:"
out_has "cold log:"
out_has "write amplification"
run 0 "$D" checkpoint
out_has "checkpoint "
run 0 "$D" checkpoints
out_has "hot log [begin, end)"
run 0 "$D" info
out_has "recovered from      checkpoint"
run 0 "$D" compact
run 0 "$D" compact --force
out_has "bytes on disk before"

# ---- a closed stdout: an output error, never output into a store file ----
"$EMBER" "$D" get hello >&- 2>"$ERR"
rc=$?
[ "$rc" = 3 ] || fail "get with stdout closed exited $rc, want 3"
"$EMBER" "$D" dump >&- 2>"$ERR"
rc=$?
[ "$rc" = 3 ] || fail "dump with stdout closed exited $rc, want 3"
[ ! -s "$D/LOCK" ] || fail "the tool's output went into LOCK: $(head -c 80 "$D/LOCK" | od -c | head -2)"
run 0 "$D" verify

# ---- read-only ----
run 0 --readonly "$D" get hello
out_is "again"
run 0 --readonly "$D" verify
run 0 --readonly "$D" dump --keys-only
[ "$(wc -l <"$OUT")" = 6 ] || fail "read-only dump printed $(wc -l <"$OUT") keys"
run 3 --readonly "$D" put hello x
err_has "read-only"
run 3 --readonly "$D" delete hello
run 3 --readonly "$D" checkpoint
run 0 "$D" get hello
out_is "again"

# ---- a damaged record: verify exits 1 (or the open itself fails, exit 3) ----
for i in $(seq 1 40); do
	head -c 30000 /dev/urandom >"$TMP/v"
	"$EMBER" "$D" put "bulk-$i" "@$TMP/v" >/dev/null 2>&1 || fail "bulk put $i"
done
run 0 "$D" verify
off=$(grep -obUa -- "bulk-20" "$D/hot.log" | head -1 | cut -d: -f1)
[ -n "$off" ] || fail "bulk-20 not found in hot.log"
printf 'X' | dd of="$D/hot.log" bs=1 seek="$((off + 2))" conv=notrunc status=none
"$EMBER" "$D" verify >"$OUT" 2>"$ERR"
rc=$?
if [ "$rc" = 1 ]; then
	out_has "first error: hot.log offset"
	out_has "checksum mismatch"
elif [ "$rc" = 3 ]; then
	grep -qi "corrupt\|checksum" "$ERR" || fail "open failed without saying why"
else
	fail "verify of a damaged hot.log exited $rc"
fi

echo "test_cli: $n runs ok"
exit 0
