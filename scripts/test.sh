#!/usr/bin/env bash
# Installs what is missing, then runs the whole test suite (real FUSE mounts,
# Spark in local mode, the real gvfs daemon).  Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export PYSPARK_PYTHON="$VENV/bin/python"

# py-proio, the oracle for the proio writer, pins protobuf 3.x and lz4 2.x:
# it gets an interpreter of its own so it cannot downgrade fmtfs's.
ORACLE_VENV="${FMTFS_PYPROIO_VENV:-$(dirname "$VENV")/.venv-pyproio}"
if ! "$ORACLE_VENV/bin/python" -c "import proio" 2>/dev/null; then
    echo "test: installing the py-proio oracle into $ORACLE_VENV"
    python3 -m venv "$ORACLE_VENV"
    SETUPTOOLS_USE_DISTUTILS=stdlib "$ORACLE_VENV/bin/pip" install -q \
        protobuf==3.20.3 lz4==2.2.1 proio==0.12.467 2>&1 | grep -v "^WARNING: Location" || true
fi
export PYPROIO_PYTHON="$ORACLE_VENV/bin/python"
# the code stays formatted and lint-clean: either check failing fails the run
"$VENV/bin/ruff" format --check --quiet fmtfs pyspark_fmtfs tests scripts
"$VENV/bin/ruff" check --quiet fmtfs pyspark_fmtfs tests scripts
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
