#!/usr/bin/env bash
# CI's check of the .deb (run as root on Debian): builds it, installs it,
# and checks what docs/operations.md promises of it; then purges it. Any
# failure fails CI.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'dpkg --purge den >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
bash scripts/package-deb.sh "$out" >/dev/null
dpkg -i "$out"/den_*.deb
fail() { echo "check-deb: $*" >&2; exit 1; }
den version | grep -q '^den ' || fail "den version does not answer"
pkgversion=$(dpkg-query -W -f '${Version}' den)
den version | grep -qF "den $pkgversion," || fail "den version says $(den version), not the package's $pkgversion"
# The documentation as the docs link it: Markdown and its pictures, no Go.
doc=/usr/share/doc/den
[ -f $doc/docs/web.md ] || fail "no $doc/docs/web.md"
find $doc -name '*.go' | grep -q . && fail "the package ships Go files as documentation: $(find $doc -name '*.go' | xargs)"
grep -ho '\.\./testdata/web/[a-z-]*\.png' $doc/docs/*.md | sort -u | while read -r img; do
  [ -f "$doc/docs/$img" ] || fail "the docs show $img, not in the package"
done
id disbatch >/dev/null || fail "no disbatch user"
id den-task >/dev/null || fail "no den-task user"
id -nG den-task | grep -qw disbatch && fail "den-task is in group disbatch"
for f in /lib/systemd/system/den.service /lib/systemd/system/den-web.service /etc/den/den.yaml /etc/default/den /etc/default/den-web; do
  [ -f "$f" ] || fail "$f missing"
done
[ "$(stat -c %U:%G:%a /etc/den/den.yaml)" = root:disbatch:640 ] || fail "/etc/den/den.yaml is $(stat -c %U:%G:%a /etc/den/den.yaml), want root:disbatch:640"
[ "$(stat -c %U:%a /etc/default/den-web)" = disbatch:600 ] || fail "/etc/default/den-web is $(stat -c %U:%a /etc/default/den-web)"
# The node's user reads its configuration as installed; den-task does not.
runuser -u disbatch -- den config print --config /etc/den/den.yaml >/dev/null || fail "disbatch cannot read the configuration"
runuser -u den-task -- cat /etc/den/den.yaml >/dev/null 2>&1 && fail "den-task can read the configuration"
# Nothing enabled: the units are not wanted by any target.
[ ! -e /etc/systemd/system/multi-user.target.wants/den.service ] || fail "den.service was enabled"
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify /lib/systemd/system/den.service /lib/systemd/system/den-web.service
  systemd-analyze security --offline=true /lib/systemd/system/den.service | tail -1
fi
echo "check-deb: $(ls "$out"/den_*.deb | xargs -n1 basename) installs and checks out"
