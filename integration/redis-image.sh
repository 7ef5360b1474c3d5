#!/usr/bin/env bash
# Builds a Docker image holding this machine's redis-server (Debian's
# package) and the libraries it links, for the integration suite's Docker
# backend where no image registry can be reached:
#
#   integration/redis-image.sh [name]      # default redlock-test/redis:local
#   REDLOCK_BACKEND=docker REDLOCK_REDIS_IMAGE=redlock-test/redis:local \
#     TESTCONTAINERS_RYUK_DISABLED=true go test ./integration
#
# It needs redis-server on PATH and a Docker engine. Where Docker Hub can be
# reached, skip this and let the harness pull redis:7.0.
set -euo pipefail
name="${1:-redlock-test/redis:local}"
bin="$(command -v redis-server)"
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/bin" "$root/tmp" "$root/data"
cp -L "$bin" "$root/usr/bin/redis-server"
for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
tar -C "$root" -c . | docker import \
  --change 'WORKDIR /data' \
  --change 'CMD ["redis-server"]' - "$name" >/dev/null
echo "$name"
