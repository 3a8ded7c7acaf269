#!/usr/bin/env bash
# Installs what is missing, generates a small sample source for every format
# fmtfs supports into a temporary folder, mounts each, shows `ls -l` and the
# first lines of its views, runs a Spark query over one mount, unmounts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
PY="$VENV/bin/python"
work="$(mktemp -d /tmp/fmtfs-demo.XXXXXX)"
mounts=()
cleanup() {
    for m in ${mounts[@]+"${mounts[@]}"}; do fmtfs umount "$m" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

for format in wallaby beats kestrel gvfs proio; do
    [ -f "fmtfs/samples/$format.py" ] || continue
    echo
    echo "=== $format"
    mkdir -p "$work/$format/src" "$work/$format/mnt"
    source_path="$("$PY" -m fmtfs.samples "$format" "$work/$format/src" 200 | tail -n 1)"
    fmtfs mount "$source_path" "$work/$format/mnt" --cache-dir "$work/cache"
    mounts+=("$work/$format/mnt")
    (cd "$work/$format/mnt" && ls -lR | head -n 40)
    first_view="$(cd "$work/$format/mnt" && find . -path ./parquet -prune -o -name '*.jsonl' ! -name '_*' -print | sort | head -n 1)"
    if [ -n "$first_view" ]; then
        echo "--- head -n 3 $first_view"
        head -n 3 "$work/$format/mnt/$first_view" | cut -c 1-200
    fi
done

if [ -f scripts/spark_query.py ]; then
    echo
    echo "=== Spark over the wallaby mount"
    PYSPARK_PYTHON="$PY" "$PY" scripts/spark_query.py "$work/wallaby/mnt" events.log
fi
