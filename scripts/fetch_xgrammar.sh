#!/usr/bin/env bash
# Puts xgrammar's C++ sources (its PyPI source package, pinned by version and sha256) at
# $KESTREL_DEPS_DIR/xgrammar-0.2.9 (default ~/.cache/kestrel/deps) and prints that path.
# Kestrel builds the library from them (cmake/xgrammar/CMakeLists.txt: the C++ core only, no
# Python bindings); nothing of it is copied into the repository. Kestrel's changes to it are the
# patches in cmake/xgrammar/patches (each says what and why), applied here in name order; the stamp
# covers the package and the patches, so a changed patch set unpacks and patches afresh. A second
# run only checks the stamp. xgrammar is Apache-2.0 (LICENSE in the package).
set -euo pipefail

version=0.2.9
sha256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
url=https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-$version.tar.gz
deps_dir="${KESTREL_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kestrel/deps}"
target="$deps_dir/xgrammar-$version"
patches_dir="$(cd "$(dirname "$0")/../cmake/xgrammar/patches" && pwd)"
patches=("$patches_dir"/*.patch)
# KESTREL_XGRAMMAR_PATCHES=none: the package as published (scripts/check_xgrammar_patches.sh builds
# both to compare them); use it with a KESTREL_DEPS_DIR of its own.
if [ "${KESTREL_XGRAMMAR_PATCHES:-}" = none ]; then patches=(); fi
stamp="$sha256 patches $(cat /dev/null "${patches[@]}" | sha256sum | cut -d' ' -f1)"

if [ -f "$target/.kestrel-sha256" ] && [ "$(cat "$target/.kestrel-sha256")" = "$stamp" ]; then
  echo "$target"
  exit 0
fi

mkdir -p "$deps_dir"
work="$(mktemp -d "$deps_dir/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "fetch_xgrammar: downloading xgrammar $version (source package) from PyPI" >&2
python3 - "$url" "$work/xgrammar.tar.gz" <<'PY'
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=180) as r, open(sys.argv[2], "wb") as f:
    f.write(r.read())
PY
actual="$(sha256sum "$work/xgrammar.tar.gz" | cut -d' ' -f1)"
if [ "$actual" != "$sha256" ]; then
  echo "fetch_xgrammar: xgrammar-$version.tar.gz has sha256 $actual, expected $sha256" >&2
  exit 1
fi
tar -xzf "$work/xgrammar.tar.gz" -C "$work"
for p in ${patches[@]+"${patches[@]}"}; do
  if ! patch -p1 -s --forward --no-backup-if-mismatch -d "$work/xgrammar-$version" < "$p" >&2; then
    echo "fetch_xgrammar: $p does not apply to xgrammar $version" >&2
    exit 1
  fi
done
echo "$stamp" > "$work/xgrammar-$version/.kestrel-sha256"
rm -rf "$target"
mv "$work/xgrammar-$version" "$target"
echo "$target"
