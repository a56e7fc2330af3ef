#!/usr/bin/env bash
# The development install: cgpu into .venv with the checkout's Python files as what runs, so a
# Python edit (a module added, moved or deleted included) takes effect at once. Run this again
# after a C edit: it rebuilds the native libraries incrementally in build/ (a few seconds).
#
# `pip install -e .` gives the metadata, the commands and the native libraries (in
# site-packages/cgpu/_native). Its import hook, though, keeps a list of the files found at install
# time (a moved module then fails until the next install) and puts the checkout's folders on
# sys.path (making `hooks` and `deviceplugin` importable as top-level names, which a wheel never
# does). It is swapped for scripts/dev_finder.py, which maps only the three package roots.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
# CGPU_EXTRAS: the extras to install with it (default: test; empty: none, as scripts/demo.sh).
extras="${CGPU_EXTRAS-test}"
$PY -m pip install -q -e ".${extras:+[$extras]}"
site="$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -f "$site/_editable_skbc_cgpu.pth"
sed "s|@CHECKOUT@|$(pwd)|" scripts/dev_finder.py > "$site/_cgpu_dev.py"
echo "import _cgpu_dev" > "$site/_cgpu_dev.pth"
