#!/usr/bin/env bash
# cross_aarch64.sh SRC DIR - the library, the CLI and the examples cross-compiled
# and linked for aarch64 (tools/cross/aarch64-linux-gnu.ini): compile and link only,
# nothing runs. The build directory (DIR/aarch64) is kept, so a rerun is
# incremental. Checks that libember.so and the `ember` program are AArch64 ELF
# files and that libember.so exports ember_* under its version nodes (EMBER_0.1,
# EMBER_0.2: src/ember.map).
# Exits 77 (skipped) only when the cross compiler or the arm64 libraries are not
# installed (tools/setup installs them: docs/portability.md), 1 on any build failure.
set -euo pipefail
src=$1
dir=$2/aarch64
cross=$src/tools/cross/aarch64-linux-gnu.ini

if ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1; then
	echo "SKIP: aarch64-linux-gnu-gcc not installed (tools/setup installs gcc-aarch64-linux-gnu)"
	exit 77
fi
sysroot=/opt/ember-cross/arm64 # tools/cross/aarch64-linux-gnu.ini
for pc in liburing libxxhash; do
	if [[ ! -f $sysroot/usr/lib/aarch64-linux-gnu/pkgconfig/$pc.pc ]]; then
		echo "SKIP: no arm64 $pc in $sysroot (tools/setup unpacks it there)"
		exit 77
	fi
done

opts=(--cross-file "$cross" --buildtype=release -Dallocator=libc -Dtests=false
	-Dbenchmarks=false -Dpython=disabled -Dcuda=disabled -Dwerror=false)
if [[ -f $dir/build.ninja ]]; then
	meson setup --reconfigure "$dir" "$src" "${opts[@]}" >"$dir.setup.log" 2>&1 ||
		{ rm -rf -- "$dir"; meson setup "$dir" "$src" "${opts[@]}" >"$dir.setup.log" 2>&1; }
else
	rm -rf -- "$dir"
	meson setup "$dir" "$src" "${opts[@]}" >"$dir.setup.log" 2>&1 ||
		{ cat "$dir.setup.log"; exit 1; }
fi
echo "== configured $dir for aarch64"
ninja -C "$dir" -j"${EMBER_BUILD_JOBS:-2}"

fail=0
check_arch() {
	local f=$1 m
	m=$(LC_ALL=C readelf -h "$f" | sed -n 's/^ *Machine: *//p')
	if [[ $m == AArch64 ]]; then
		echo "ok: $f is $m"
	else
		echo "FAIL: $f is '$m', not AArch64"
		fail=1
	fi
}
lib=$(ls "$dir"/libember.so.*.*.* | head -n 1)
check_arch "$lib"
check_arch "$dir/tools/cli/ember"
for ex in "$dir"/examples/c/*; do
	[[ -x $ex && -f $ex ]] && check_arch "$ex"
done
# every exported function is ember_* and carries the version
bad=$(LC_ALL=C readelf --dyn-syms -W "$lib" | awk '$5 == "GLOBAL" && $7 != "UND" && $8 != "" {print $8}' |
	grep -Ev '^ember_.*@@EMBER_0\.[12]$|^EMBER_0\.[12](@@EMBER_0\.[12])?$' || true)
if [[ -n $bad ]]; then
	echo "FAIL: exported symbols outside ember_*@@EMBER_0.1 / EMBER_0.2:"
	echo "$bad" | head -n 20
	fail=1
fi
n=$(LC_ALL=C readelf --dyn-syms -W "$lib" | grep -c '@@EMBER_0\.[12]' || true)
echo "libember.so (aarch64) exports $n symbols under EMBER_0.1 and EMBER_0.2"
((n > 50)) || { echo "FAIL: too few exported symbols"; fail=1; }
exit $fail
