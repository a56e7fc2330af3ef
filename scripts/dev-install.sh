#!/usr/bin/env bash
# The development install: cgpu into .venv, editable. The checkout's Python files are what runs,
# so a Python edit takes effect at once; run this again after a C edit (it rebuilds the native
# libraries incrementally in build/, a few seconds).
#
# scikit-build-core's editable .pth also puts the checkout's folders on sys.path (for editors);
# that would make the checkout's `hooks` and `deviceplugin` importable as top-level names, which
# the installed package never has. Keep only the line that installs the import finder.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
$PY -m pip install -q -e ".[test]"
pth="$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_editable_skbc_cgpu.pth"
grep '^import ' "$pth" > "$pth.tmp"
mv "$pth.tmp" "$pth"
