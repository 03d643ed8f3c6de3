#!/usr/bin/env bash
# Builds and runs a CPU-emulated kernel check (simt.h) from
# tools/cuda/simt/*_check.cpp: each check includes kernel files as
# "<name>.cu.simt" (common.cuh + npu/cuda/kernels/<name>.cu, with extern
# "C" dropped so that two versions can live in two namespaces: prep.py) or
# "<name>@<commit>.cu.simt" (common.cuh and that file as of a git commit).
# Needs g++ (C++17, _Float16: GCC 12) and python3.
#   tools/cuda/simt/run.sh                 # every check
#   tools/cuda/simt/run.sh kda_check.cpp   # some
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
dir=$root/tools/cuda/simt
kdir=$root/npu/cuda/kernels
cxx=${CXX:-g++}
command -v "$cxx" >/dev/null || { echo "simt: no $cxx" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# prep SRC OUT NAME [COMMON]: COMMON (today's common.cuh) + SRC, rewritten
# for the emulator.
prep() { python3 "$dir/prep.py" "$2" "${4:-$kdir/common.cuh}" "$1" "$3"; }
checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=($(cd "$dir" && ls *_check.cpp))
rc=0
for c in "${checks[@]}"; do
	missing=
	for at in $(grep -oE '@[0-9a-f]+\.cu\.simt"' "$dir/$c" | grep -oE '[0-9a-f]{7,}' | sort -u); do
		git -C "$root" cat-file -e "$at^{commit}" 2>/dev/null || missing="$missing $at"
	done
	if [ -n "$missing" ]; then
		echo "skip $c: commit$missing not in this clone (a shallow one?)"
		continue
	fi
	for inc in $(grep -oE '"[A-Za-z0-9_]+(@[0-9a-f]+)?\.cu\.simt"' "$dir/$c" | tr -d '"' | sort -u); do
		name=${inc%.cu.simt}
		if [[ $name == *@* ]]; then
			git -C "$root" show "${name#*@}:npu/cuda/kernels/${name%@*}.cu" >"$tmp/$name.src"
			git -C "$root" show "${name#*@}:npu/cuda/kernels/common.cuh" >"$tmp/$name.common"
			prep "$tmp/$name.src" "$tmp/$inc" "${name%@*}.cu" "$tmp/$name.common"
		else
			prep "$kdir/$name.cu" "$tmp/$inc" "$name.cu"
		fi
	done
	bin=$tmp/${c%.cpp}
	if ! "$cxx" -std=c++17 -O2 -ffp-contract=off -w -I"$tmp" -I"$dir" -include "$dir/simt.h" -o "$bin" "$dir/$c"; then
		echo "FAIL $c (build)"
		rc=1
		continue
	fi
	if (cd "$tmp" && "$bin"); then
		echo "ok   $c"
	else
		echo "FAIL $c"
		rc=1
	fi
done
exit $rc
