#!/usr/bin/env bash
# Builds den's release files: for each architecture a static binary
# (CGO_ENABLED=0: den needs no C library; docs/operations.md, "Releases")
# with the version stamped (scripts/version.sh), packed with the README, the
# docs, the pictures they show and the units in
# OUTDIR/den_VERSION_linux_ARCH.tar.gz; its .deb beside it
# (scripts/package-deb.sh); and OUTDIR/SHA256SUMS of them all, which
# `sha256sum -c SHA256SUMS` verifies.
#   scripts/release.sh [OUTDIR [ARCH...]]   # default: dist/, amd64 arm64
# DEN_RELEASE_DEB=0 leaves the .debs out.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
shift || true
arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(amd64 arm64)
mkdir -p "$out"
out=$(cd "$out" && pwd)
version=$(bash scripts/version.sh)
case $version in *.dirty) echo "release: the tree has uncommitted changes: version $version" >&2 ;; esac
# The archives' files get the commit's time and root's ownership, and gzip
# no name or time, so that the same commit packs the same bytes.
mtime=@$(git log -1 --format=%ct 2>/dev/null || echo 0)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
files=()
for arch in "${arches[@]}"; do
  name=den_${version}_linux_$arch
  dir=$work/$name
  mkdir -p "$dir/docs/monitoring" "$dir/testdata/web" "$dir/scripts"
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X github.com/den-project/den/den/cli.stampedVersion=$version" -o "$dir/den" ./cmd/den
  # The documentation as the .deb ships it (Markdown and the pictures it
  # shows, no Go), and the units and their settings, which the docs link.
  cp README.md "$dir/"
  cp docs/*.md "$dir/docs/"
  cp docs/monitoring/* "$dir/docs/monitoring/"
  cp testdata/web/*.png "$dir/testdata/web/"
  cp scripts/den.service scripts/den-web.service scripts/den.env scripts/den-web.env scripts/den.yaml "$dir/scripts/"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" --mode='u+rwX,go+rX,go-w' \
    -C "$work" -cf - "$name" | gzip -n -9 >"$out/$name.tar.gz"
  files+=("$name.tar.gz")
  if [ "${DEN_RELEASE_DEB:-1}" != 0 ]; then
    deb=$(DEN_DEB_BINARY="$dir/den" bash scripts/package-deb.sh "$out" "$arch")
    files+=("$(basename "$deb")")
  fi
done
(cd "$out" && sha256sum "${files[@]}" >SHA256SUMS)
(cd "$out" && ls -l "${files[@]}" SHA256SUMS)
