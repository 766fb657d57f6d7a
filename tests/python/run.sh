#!/usr/bin/env bash
# The Python client's tests (clients/python/tests), as one ctest:
#   run.sh SOURCE_DIR WORK_DIR SEGSTORED
# Makes a fresh virtual environment in WORK_DIR with Debian's own python3
# (--system-site-packages: Debian's msgpack and pytest), installs the client
# into it offline (no package index: --no-index, --no-build-isolation, the
# build backend from Debian's python3-setuptools), then runs pytest from it
# against SEGSTORED, the daemon this build made.
set -euo pipefail
src=$1 work=$2 segstored=$3
python=/usr/bin/python3  # not whatever python3 comes first on PATH (pyenv shims)

[[ -x "$segstored" ]] || { echo "run.sh: no segstored at $segstored" >&2; exit 1; }
mkdir -p "$work"
venv="$work/venv"
rm -rf "$venv" "$work/src" "$work/tmp"
"$python" -m venv --system-site-packages "$venv"

# pip builds in the directory it is given: build a copy, not the source tree.
mkdir -p "$work/src"
cp -r "$src/pyproject.toml" "$src/README.md" "$src/segstore" "$work/src/"
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install --quiet \
  --no-build-isolation --no-index "$work/src"

cd "$work"  # not the source directory: tests import the installed package
installed=$("$venv/bin/python" -c 'import segstore; print(segstore.__file__)')
[[ "$installed" == "$venv"/* ]] || { echo "run.sh: segstore imported from $installed" >&2; exit 1; }

export SEGSTORED="$segstored" PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" -m pytest -p no:cacheprovider --basetemp="$work/tmp" \
  -o console_output_style=classic -rfEs --durations=5 "$src/tests"
