#!/usr/bin/env bash
# What `make compose-*` needs on a Debian machine, installed and started if missing:
# Debian's docker.io (dockerd) and docker-compose, and debootstrap. There is no systemd
# here, so dockerd runs in the background, logging to build/compose/dockerd.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/compose
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
    echo "starting dockerd (log: build/compose/dockerd.log)"
    nohup dockerd >build/compose/dockerd.log 2>&1 &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && exit 0
        sleep 0.5
    done
    echo "dockerd did not start; see build/compose/dockerd.log" >&2
    exit 1
fi
