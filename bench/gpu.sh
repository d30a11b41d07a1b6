#!/usr/bin/env bash
# The GPU table on a bare GPU machine: install the wheels bench/gpu_wheels.py packed into .whl/ (offline, into a
# folder of their own put first on PYTHONPATH), then run bench/gpu.py on the GPU with the arguments given.
#   bash bench/gpu.sh [bench/gpu.py's arguments]         e.g. FEDSIM_COMMIT=abc1234 bash bench/gpu.sh > gpu.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
site="${FEDSIM_SITE:-/tmp/fedsim-site}"
if [ -f .whl/wheels.tar.xz ] && [ ! -d "$site" ]; then
  wheels="$(mktemp -d)"
  "$python" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
    .whl/wheels.tar.xz "$wheels"  # Python's own xz: the machine may have no xz command
  rm -rf "$site.partial"  # installed aside and renamed, so a failed install is never taken for a done one
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site.partial" "$wheels"/*.whl
  mv "$site.partial" "$site"
  rm -rf "$wheels"
fi
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec "$python" bench/gpu.py "$@"
