#!/usr/bin/env bash
# `make lock`: pins what the image installs, with the SHA-256 of every file PyPI has for
# each pinned version (every platform: the arm64 build checks the same lock), into
#   requirements/image.txt   the base dependencies and the `operator` extra (pyproject.toml)
#   requirements/build.txt   the build-system requirements (the operator's own wheel)
#   requirements/plugin.txt  the base dependencies: what the krew archives' kubectl-sps carries
#   requirements/plugin.lock.json   the same pins as pex's lock, each platform's and CPython's
#       files named (release/build-plugin.sh builds the archives from it without resolving)
# The Dockerfile installs them with --require-hashes, so two builds of one commit install
# the same files. pip-tools (pinned below) runs from a venv in the cache. Run it after a
# change of the dependencies in pyproject.toml; tests/ship/test_ship_dockerfile.py fails
# until then. Resolved for the image's Python (3.11) on linux.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
PIP_TOOLS=7.6.2
py=${PYTHON:-$repo/.venv/bin/python}
"$py" -c 'import sys; assert sys.version_info[:2] == (3, 11), "the image runs Python 3.11: lock with it"'
cache=${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/pip-tools-$PIP_TOOLS
if [ ! -x "$cache/bin/pip-compile" ]; then
  rm -rf "$cache"
  "$py" -m venv "$cache"
  "$cache/bin/pip" install -q "pip-tools==$PIP_TOOLS" || { rm -rf "$cache"; exit 1; }
fi
out=$repo/requirements
# The lock names PyPI's files only, never a wheel directory of this machine.
unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL
mkdir -p "$out"
PYTHONPATH="$here" "$py" -m sps_release lock-inputs "$out"
cd "$repo"
for name in image build plugin; do
  # --allow-unsafe: setuptools is a requirement (build.txt) and must be pinned too.
  CUSTOM_COMPILE_COMMAND="make lock" "$cache/bin/pip-compile" --quiet --generate-hashes \
    --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
    --output-file "requirements/$name.txt" "requirements/$name.in"
done
PYTHON="$py" bash "$here/build-plugin.sh" --lock
echo "locked: requirements/image.txt build.txt plugin.txt plugin.lock.json" >&2
