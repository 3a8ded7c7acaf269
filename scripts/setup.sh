#!/usr/bin/env bash
# Installs what fmtfs needs on a Debian machine (as root), only what is
# missing: Debian packages, then a virtualenv in .venv with fmtfs and its
# test and profiling tools, and links `fmtfs` and `mount.fmtfs` into the
# system's paths (mount(8) and mount.fuse3 look only there).  Sourced by
# scripts/test.sh and scripts/demo.sh; idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FMTFS_VENV:-$ROOT/.venv}"

# fuse3: fusermount3 and the kernel interface; libfuse3-dev + pkg-config: pyfuse3 builds against them;
# java: Spark; dbus + gvfs-daemons + libglib2.0-bin (gio): the real gvfs daemon as the gvfs oracle;
# jq: the README's examples use it.
# python3-venv + python3-dev: the virtualenv is Debian's interpreter's (below).
DEBIAN_PACKAGES=(fuse3 libfuse3-dev pkg-config openjdk-17-jre-headless dbus gvfs gvfs-daemons libglib2.0-bin jq
    python3-venv python3-dev)

missing=()
for package in "${DEBIAN_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
# a JDK 17 already on PATH serves Spark as well as Debian's
if command -v java >/dev/null && java -version 2>&1 | grep -q '"17\.'; then
    missing=("${missing[@]/openjdk-17-jre-headless}")
fi
missing=(${missing[@]+"${missing[@]}"})
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ -e /dev/fuse ] || { echo "setup: /dev/fuse is missing (in Docker: --device /dev/fuse --cap-add SYS_ADMIN)" >&2; exit 1; }

# Debian's python3, not the first python3 on PATH: a pyenv build (configured
# without --enable-optimizations, with a shared libpython) ran `fmtfs cat`
# 0.81 s where Debian's took 0.64 s (README, *Benchmarks*).  FMTFS_PYTHON
# names another interpreter.
PYTHON="${FMTFS_PYTHON:-/usr/bin/python3}"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)"
# a virtualenv made by another interpreter (an older set-up's) is made anew
if [ -x "$VENV/bin/python" ] && ! grep -qx "executable = $(readlink -f "$PYTHON")" "$VENV/pyvenv.cfg" 2>/dev/null; then
    echo "setup: $VENV was made by another interpreter; making it anew with $PYTHON"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
# reinstall only when the declared dependencies or their pinned versions changed
stamp="$VENV/.fmtfs-deps"
want="$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/constraints.txt" | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "setup: installing fmtfs and its dependencies into $VENV"
    "$VENV/bin/pip" install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
    # editable: the checkout itself is on sys.path (pyproject's package-dir makes it a plain .pth)
    # at the versions tests ran with (scripts/constraints.txt says why and how to move on)
    "$VENV/bin/pip" install -q -c "$ROOT/scripts/constraints.txt" -e "$ROOT[test,dev]" 2>&1 \
        | grep -v "^WARNING: Location" || true
    "$VENV/bin/python" -c "import fmtfs, pyfuse3, pyspark" || { echo "setup: install failed" >&2; exit 1; }
    echo "$want" > "$stamp"
fi
# bytecode for the checkout, as pip writes it for an installed package: an
# editable install has none, and with PYTHONDONTWRITEBYTECODE set every
# `fmtfs` command compiled its modules anew (about 0.1-0.25 s of each start);
# only files changed since the last run are compiled again
"$VENV/bin/python" -m compileall -q -j 0 "$ROOT/fmtfs" "$ROOT/pyspark_fmtfs" >/dev/null
# `fmtfs` as the README writes it, and the mount helpers: mount.fuse3 starts
# `fmtfs` through /bin/sh with the system's PATH; mount(8) finds mount.fmtfs in /sbin
link() {
    if [ "$(readlink "$2" 2>/dev/null)" != "$1" ]; then
        ln -sfn "$1" "$2" && echo "setup: linked $2 -> $1"
    fi
}
link "$VENV/bin/fmtfs" /usr/local/bin/fmtfs
link "$VENV/bin/mount.fmtfs" /sbin/mount.fmtfs
export PATH="$VENV/bin:$PATH"
