#!/usr/bin/env bash
# The real polkitd, a system-type dbus-daemon and vgpud on a simulated host, in a private
# mount namespace (tests/polkit/system-bus.sh), with a broker user in the group vgpud: run as
# `unshare --mount --propagation private namespace.sh ...` by tests/polkit.rs.
#
# Arguments: REPO WORK VGPUD SIMROOT CALLS. CALLS has one call a line:
# `METHOD<TAB>INTERFACE.MEMBER<TAB>OBJECT<TAB>ARGS...` (gdbus call's argument syntax).
# Each call is made as root, as the broker and as nobody; prints
# `RESULT<TAB>caller<TAB>METHOD<TAB>ok|<D-Bus error name><TAB>message` per call.
set -euo pipefail
repo=$1 work=$2 vgpud=$3 simroot=$4 calls=$5
# shellcheck source=tests/polkit/system-bus.sh
. "$repo/tests/polkit/system-bus.sh"
start_system_bus "$repo" "$work" "$vgpud" "$simroot" vgpud-broker 64900
echo "READY polkitd and vgpud are on the bus"

run_as() {
  case $1 in
    root) shift; "$@" ;;
    broker) shift; setpriv --reuid=vgpud-broker --regid=vgpud-broker --init-groups "$@" ;;
    nobody) shift; setpriv --reuid=65534 --regid=65534 --clear-groups "$@" ;;
  esac
}
for caller in root broker nobody; do
  call_each "$caller" "$calls" run_as "$caller"
done
echo "AUDIT $(grep -c 'audit' "$work/vgpud.log" || true)"
