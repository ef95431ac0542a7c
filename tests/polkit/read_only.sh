#!/usr/bin/env bash
# Callers whose polkit grants a test chooses, under the real polkitd in a private mount
# namespace (tests/polkit/system-bus.sh): run as
# `unshare --mount --propagation private read_only.sh ...` by tests/authorization_spec.rs.
#
# Arguments: REPO WORK VGPUD SIMROOT CALLS RULES SETUP. RULES is a polkit .rules file put in
# /etc/polkit-1/rules.d next to the project's before polkitd starts. It decides for two users
# of the group vgpud (so the bus lets every call through to vgpud, and polkit alone decides):
# vgpud-reader and vgpud-denied. SETUP is a calls file made as root first. Each call of CALLS is
# made as the reader, then as the denied user; prints `STATE before|after <GetManagedObjects
# and ListDevices as root>` around them, and a `RESULT` line per call (call_each).
set -euo pipefail
repo=$1 work=$2 vgpud=$3 simroot=$4 calls=$5 rules=$6 setup=$7
# shellcheck source=tests/polkit/system-bus.sh
. "$repo/tests/polkit/system-bus.sh"
mkdir -p "$work/rules"
install -m 0644 "$rules" "$work/rules/"
start_system_bus "$repo" "$work" "$vgpud" "$simroot" vgpud-reader 64910
# The second user: in the group vgpud by its primary group (the file is bind-mounted, so it
# is appended to, not replaced).
gid=$(awk -F: '$1 == "vgpud" { print $3 }' "$work/group")
echo "vgpud-denied:x:64911:$gid:vgpud test user:/nonexistent:/usr/sbin/nologin" >>"$work/passwd"
echo "READY polkitd and vgpud are on the bus"

state() { # WHEN: the managed objects and the devices, as root, in JSON
  local what out
  printf 'STATE\t%s' "$1"
  for what in "org.freedesktop.DBus.ObjectManager GetManagedObjects" "org.vgpud1.Manager ListDevices"; do
    # shellcheck disable=SC2086 # interface and member
    out=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" --json=short call org.vgpud1 /org/vgpud1 $what 2>&1) || true
    printf '\t%s' "$(printf '%s' "$out" | tr '\n\t' '  ')"
  done
  printf '\n'
}
call_each setup "$setup"
state before
call_each reader "$calls" setpriv --reuid=vgpud-reader --regid=vgpud-reader --init-groups
call_each denied "$calls" setpriv --reuid=vgpud-denied --regid="$gid" --init-groups
state after
