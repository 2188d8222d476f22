#!/usr/bin/env bash
# install_consume.sh BUILD SRC SANITIZE CC - what `meson install` gives a user works.
#
# Installs BUILD (already built: --no-rebuild) into a temporary directory
# (DESTDIR), then, as a user would, with only what was installed: pkg-config finds
# ember.pc (PKG_CONFIG_SYSROOT_DIR maps its paths into the directory); the README's
# program (examples/c/hello.c) compiles and links with `pkg-config --cflags --libs
# ember`, needs libember's EMBER_0.1 symbols, and runs against the installed
# library; the installed CLI runs the man page's examples; the man page renders
# without warnings (when groff is installed). SANITIZE is the build's b_sanitize
# (the program gets the same -fsanitize, as an instrumented library needs).
set -euo pipefail
build=$1 src=$2 sanitize=$3 cc=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ember-install.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; fail "meson install"; }
root=$tmp/root
pc=$(find "$root" -name ember.pc | head -n 1)
[[ -n $pc ]] || fail "no ember.pc installed"
lib=$(find "$root" -name 'libember.so.*' -type f | head -n 1)
[[ -n $lib ]] || fail "no libember.so.* installed"
[[ -e $(dirname "$lib")/libember.so ]] || fail "no libember.so link for -lember"
for h in ember.h ember_cache.h ember_graph.h ember_gpu.h; do
	[[ -n $(find "$root" -path "*/include/$h") ]] || fail "header $h not installed"
done
cli=$(find "$root" -path '*/bin/ember' -type f | head -n 1)
[[ -n $cli ]] || fail "the ember CLI not installed"
man=$(find "$root" -path '*/man1/ember.1*' | head -n 1)
[[ -n $man ]] || fail "no ember.1 man page installed"
echo "installed: ${pc#$root}, ${lib#$root}, ${cli#$root}, ${man#$root}"

export PKG_CONFIG_SYSROOT_DIR=$root
export PKG_CONFIG_PATH=$(dirname "$pc")
pkg-config --exists ember || fail "pkg-config cannot find ember"
echo "pkg-config: ember $(pkg-config --modversion ember): $(pkg-config --cflags --libs ember)"
[[ $(pkg-config --modversion ember) == "$(meson introspect --projectinfo "$build" |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')" ]] ||
	fail "ember.pc's version is not the project's"

flags=()
[[ $sanitize != none ]] && flags=(-fsanitize="$sanitize")
# shellcheck disable=SC2046 # pkg-config's output is words
"$cc" -std=c11 -Wall -Werror "${flags[@]}" "$src/examples/c/hello.c" -o "$tmp/hello" \
	$(pkg-config --cflags ember) $(pkg-config --libs ember) || fail "hello.c does not build"
versions=$(LC_ALL=C readelf -V "$tmp/hello")
grep -q 'Name: EMBER_0\.1' <<<"$versions" ||
	fail "hello does not bind libember's EMBER_0.1 symbols"
libdir=$(dirname "$lib")
out=$(LD_LIBRARY_PATH=$libdir "$tmp/hello" "$tmp/store")
echo "hello: $out"
[[ $out == "hello -> world" ]] || fail "hello printed '$out'"
# the library it ran with is the installed one (ldd's output taken whole: grep -q
# would stop reading early and fail the pipeline with ldd's SIGPIPE)
deps=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/hello")
grep -q "libember.so.0 => $libdir/libember.so" <<<"$deps" ||
	{ echo "$deps"; fail "hello did not load the installed libember.so"; }

# the installed CLI: the man page's examples
run_cli() { LD_LIBRARY_PATH=$libdir "$cli" "$@"; }
run_cli --create "$tmp/cli" put hello world >/dev/null || fail "ember put"
[[ $(run_cli "$tmp/cli" get hello) == world ]] || fail "ember get"
hot=$(run_cli "$tmp/cli" stats | awk '/^hot log:/ { h = 1 } h && $1 == "records" { print $2; exit }')
[[ $hot == 1 ]] ||
	{ run_cli "$tmp/cli" stats; fail "ember stats on the reopened store does not show its record"; }
run_cli --readonly "$tmp/cli" verify >/dev/null || fail "ember verify"

if command -v groff >/dev/null 2>&1; then
	case $man in *.gz) zcat "$man" >"$tmp/ember.1" ;; *) cp "$man" "$tmp/ember.1" ;; esac
	warn=$(groff -man -Tutf8 -ww -z "$tmp/ember.1" 2>&1 || true)
	[[ -z $warn ]] || fail "ember.1 renders with warnings: $warn"
	echo "ember.1 renders cleanly"
fi
echo "ok"
