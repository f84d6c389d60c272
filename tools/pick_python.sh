#!/bin/sh
# Prints the interpreter `make` creates .venv with (the Makefile's PYTHON; set PYTHON to
# choose another): the first Python 3.11+ here that can make a venv, preferring a build the
# gateway runs fast on. pyenv's default build (a shared libpython without
# --enable-optimizations) costs the gateway 11-28% more CPU a request and the test suite
# about a quarter more CPU than Debian's python3 (docs/performance.md, "The interpreter").
cd "$(dirname "$0")/.." || exit 1
fallback=""
for candidate in python3 python3.13 python3.12 python3.11 /usr/bin/python3 /usr/local/bin/python3; do
  command -v "$candidate" >/dev/null 2>&1 || continue
  "$candidate" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' \
    >/dev/null 2>&1 || continue
  if "$candidate" gateway/cli/interpreter.py --fast >/dev/null 2>&1; then
    echo "$candidate"
    exit 0
  fi
  [ -n "$fallback" ] || fallback="$candidate"
done
echo "${fallback:-python3}"
