#!/usr/bin/env bash
# Builds den's .deb (binary, systemd units, an example configuration, the
# disbatch and den-task users; nothing started until configured) with nfpm,
# taken from the Go module proxy at a pinned version, so that no packager
# needs installing and a new nfpm cannot change the package unseen.
#   scripts/package-deb.sh [OUTDIR [ARCH]]   # default: dist/, the host's GOARCH
#   dpkg -i dist/den_*.deb
# DEN_DEB_BINARY names a den already built for ARCH (scripts/release.sh
# passes its own); else den is built here, static (CGO_ENABLED=0), with the
# version stamped.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
arch=${2:-$(go env GOARCH)}
mkdir -p "$out"
nfpm=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
version=$(bash scripts/version.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=${DEN_DEB_BINARY:-}
if [ -z "$bin" ]; then
  # den version says the package's version (Go's own build information says
  # "(devel)" for a build from a checkout without its VCS stamp).
  bin=$work/den
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X github.com/den-project/den/den/cli.stampedVersion=$version" -o "$bin" ./cmd/den
fi
# nfpm expands no variables in a file's path: the binary's goes in here.
sed "s|DEN_BINARY|$bin|" scripts/nfpm.yaml >"$work/nfpm.yaml"
DEN_DEB_ARCH=$arch DEN_DEB_VERSION=$version \
  go run "$nfpm" package --config "$work/nfpm.yaml" --packager deb --target "$out" >/dev/null
ls "$out/den_${version}_$arch.deb"
