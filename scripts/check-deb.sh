#!/usr/bin/env bash
# CI's check of the .deb (run as root on Debian): builds it, installs it,
# and checks what docs/operations.md promises of it; then removes it and
# purges it, and checks what each leaves behind. Any failure fails CI.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
out=$(mktemp -d)
# Whatever happens, nothing of den is left: a failed run leaves no package
# and no symlink of the units it enabled.
cleanup() {
  dpkg --purge den >/dev/null 2>&1 || true
  rm -f /etc/systemd/system/multi-user.target.wants/den.service /etc/systemd/system/multi-user.target.wants/den-web.service
}
trap 'cleanup; rm -rf "$out"' EXIT
fail() { echo "check-deb: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "run me as root: I install and remove the package"
bash scripts/package-deb.sh "$out" >/dev/null
deb=$(ls "$out"/den_*.deb)
# What is on the machine before: after dpkg -r and -P, the difference must
# be what docs/operations.md says is kept.
cleanup
files() {
  local roots=(/etc /usr /var /opt /srv)
  [ -L /lib ] || roots+=(/lib)
  find "${roots[@]}" -xdev \( -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/cache -o -path /var/log \
    -o -path /var/tmp -o -path /var/backups -o -path /var/lib/postgresql \) -prune -o -print | sort
}
files >"$out/before"
dpkg -i "$deb" >/dev/null
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

# Removal. The units enabled as an operator would, and state in
# /var/lib/den as den.service makes it (StateDirectory=).
systemctl enable den.service den-web.service >/dev/null 2>&1
[ -L /etc/systemd/system/multi-user.target.wants/den.service ] || fail "systemctl enable made no symlink here: nothing to check"
install -d -o disbatch -g disbatch -m 0750 /var/lib/den
echo state >/var/lib/den/state
# prerm stops the units only where systemd runs, which this machine may
# not: a mount namespace makes it look so (/run/systemd/system), and a
# systemctl there notes what it is asked.
fake=$(mktemp -d -p "$out")
printf '#!/bin/sh\necho "$*" >>%s/calls\n' "$fake" >"$fake/systemctl"
chmod +x "$fake/systemctl"
fakesystemd() { unshare -m sh -c 'mount -t tmpfs none /run/systemd && mkdir /run/systemd/system && exec "$@"' sh env PATH="$fake:$PATH" "$@"; }
# An upgrade (the same package again) stops and disables nothing.
fakesystemd dpkg -i "$deb" >/dev/null
grep -qE '^(stop|disable)' "$fake/calls" && fail "an upgrade stops or disables the units: $(cat "$fake/calls")"
[ -L /etc/systemd/system/multi-user.target.wants/den.service ] || fail "an upgrade disabled den.service"
fakesystemd dpkg -r den >/dev/null
grep -qx 'stop den-web.service den.service' "$fake/calls" || fail "dpkg -r did not stop the units: $(cat "$fake/calls")"
grep -qx 'disable den-web.service den.service' "$fake/calls" || fail "dpkg -r did not disable the units: $(cat "$fake/calls")"
dpkg -i "$deb" >/dev/null
# The real systemctl, where no systemd runs: disable works on the symlinks.
dpkg -r den >/dev/null
dangling=$(find /etc/systemd -xtype l 2>/dev/null | xargs -r ls -l | grep -F /den || true)
[ -z "$dangling" ] || fail "dpkg -r left dangling symlinks: $dangling"
# What dpkg -r keeps: the conffiles (edits survive a reinstall), the state
# (/var/lib/den) and the users. The users' own files (/etc/passwd and its
# kin, their backups) may appear: adduser keeps a backup of each.
users='^/etc/(passwd|group|shadow|gshadow|subuid|subgid)-?$'
left=$(files | comm -13 "$out/before" - | grep -Ev "$users" || true)
want=$(printf '%s\n' /etc/default/den /etc/default/den-web /etc/den /etc/den/den.yaml /var/lib/den /var/lib/den/state | sort)
[ "$left" = "$want" ] || fail "dpkg -r left $(echo $left), want $(echo $want)"
gone=$(comm -23 "$out/before" <(files) || true)
[ -z "$gone" ] || fail "dpkg -r took away what was there before: $gone"
id disbatch >/dev/null && id den-task >/dev/null || fail "dpkg -r removed the users"
# What dpkg -P keeps: the users alone.
dpkg -P den >/dev/null
left=$(files | comm -13 "$out/before" - | grep -Ev "$users" || true)
[ -z "$left" ] || fail "dpkg -P left $(echo $left)"
id disbatch >/dev/null && id den-task >/dev/null || fail "dpkg -P removed the users"
echo "check-deb: $(basename "$deb") installs, checks out, and leaves only what the docs say"
