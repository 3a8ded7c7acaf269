#!/usr/bin/env bash
# Installs what is missing, then runs the whole test suite (real FUSE mounts,
# Spark in local mode, the real gvfs daemon).  Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export PYSPARK_PYTHON="$VENV/bin/python"
"$VENV/bin/ruff" format --check fmtfs pyspark_fmtfs tests scripts 2>/dev/null | tail -1 || true
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
