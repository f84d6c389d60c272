#!/usr/bin/env bash
# Build the compose stack's images without an image registry (`make compose-images`):
#  1. debootstrap a minimal Debian bookworm root (once: kept as build/compose/bookworm-minbase.tar)
#     and `docker import` it as gateway-base:bookworm;
#  2. build the gateway's wheels on this machine (pip, from the package index pip is set up for);
#  3. `docker-compose build`: the gateway, Redis and Prometheus images FROM that base,
#     Python, redis-server and prometheus from Debian's packages (apt, in the build).
# Needs root, debootstrap, a running dockerd, docker-compose.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=build/compose
BASE_IMAGE=gateway-base:bookworm
PYTHON=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"

debian_mirror() {
    # the mirror apt already uses here: no host is written into this script
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources
    else
        awk '/^deb / {print $2; exit}' /etc/apt/sources.list
    fi
}

started=$(date +%s)
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    if [ ! -f "$OUT/bookworm-minbase.tar" ]; then
        root=$(mktemp -d)
        echo "debootstrap: bookworm (minbase) into $root"
        debootstrap --variant=minbase --include=ca-certificates bookworm "$root" "$(debian_mirror)" \
            > "$OUT/debootstrap.log"
        rm -rf "$root"/var/cache/apt/archives/*.deb
        tar -C "$root" -cf "$OUT/bookworm-minbase.tar.part" .
        mv "$OUT/bookworm-minbase.tar.part" "$OUT/bookworm-minbase.tar"
        rm -rf "$root"
        echo "debootstrap: $(( $(date +%s) - started )) s"
    fi
    docker import --change 'CMD ["/bin/bash"]' "$OUT/bookworm-minbase.tar" "$BASE_IMAGE"
fi

rm -rf "$OUT/wheels"
# Debian's Python is 3.11.2: redis-py needs async-timeout below 3.11.3, which this
# machine's newer Python does not, so it is added by name
"$PYTHON" -m pip wheel --quiet --wheel-dir "$OUT/wheels" . "async-timeout>=4.0.3" \
    2> >(grep -v "^WARNING: Location" >&2)

docker-compose build
echo "images built in $(( $(date +%s) - started )) s"
