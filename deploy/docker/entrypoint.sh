#!/bin/sh
# Start every container with an empty PROMETHEUS_MULTIPROC_DIR when one is set: files left
# by a previous run's workers would be merged into this run's metrics.
set -eu
if [ -n "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
    rm -rf "${PROMETHEUS_MULTIPROC_DIR:?}"
    mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
fi
exec "$@"
