#!/usr/bin/env bash
# Builds den's .deb (binary, systemd units, an example configuration, the
# disbatch and den-task users; nothing started until configured) with nfpm,
# taken from the Go module proxy at a pinned version, so that no packager
# needs installing and a new nfpm cannot change the package unseen.
#   scripts/package-deb.sh [OUTDIR]      # default: dist/
#   dpkg -i dist/den_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
mkdir -p "$out"
nfpm=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
arch=$(go env GOARCH)
# The version: the nearest tag if there is one, else 0.0.0 and the commit.
version=$(git describe --tags --abbrev=0 2>/dev/null | sed 's/^v//' || true)
version=${version:-0.0.0}+git$(git log -1 --format=%cd.%h --date=format:%Y%m%d 2>/dev/null || echo unknown)
mkdir -p dist
# den version says the package's version (Go's own build information says
# "(devel)" for a build from a checkout).
CGO_ENABLED=0 go build -trimpath -ldflags "-X github.com/den-project/den/den/cli.stampedVersion=$version" -o dist/den ./cmd/den
DEN_DEB_ARCH=$arch DEN_DEB_VERSION=$version \
  go run "$nfpm" package --config scripts/nfpm.yaml --packager deb --target "$out"
ls "$out"/den_*"$arch".deb
