#!/usr/bin/env bash
# Prints the version scripts/release.sh and scripts/package-deb.sh stamp
# into den (den version says it) and name their files with:
#   - on a tagged commit (vX.Y.Z) of an unmodified tree: X.Y.Z;
#   - else the nearest such tag's X.Y.Z, or 0.0.0 where there is none, then
#     +gitDATE.COMMIT: the commit's date in UTC (YYYYMMDD) and its first 12
#     hex digits, as den version says of a plain go build of that commit;
#   - and .dirty after it when tracked files differ from the commit.
# Outside a git checkout: 0.0.0+unknown.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
  echo 0.0.0+unknown
  exit 0
fi
dirty=
[ -z "$(git status --porcelain --untracked-files=no)" ] || dirty=.dirty
if [ -z "$dirty" ] && tag=$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null); then
  echo "${tag#v}"
  exit 0
fi
base=$(git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null || echo v0.0.0)
date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d)
echo "${base#v}+git$date.$(git rev-parse HEAD | cut -c1-12)$dirty"
