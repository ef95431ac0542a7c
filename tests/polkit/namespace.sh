#!/usr/bin/env bash
# The real polkitd, a system-type dbus-daemon and vgpud on a simulated host, in a private
# mount namespace: run as `unshare --mount --propagation private namespace.sh ...` by
# tests/polkit.rs. The project's polkit action and rules files are bind-mounted where
# polkitd reads them (and nothing else: the host's own rules are hidden), and a broker user
# that is a member of the group vgpud is added to copies of /etc/passwd and /etc/group
# bind-mounted over the real ones (polkit's isInGroup() and dbus-daemon's group policy read
# the group database). Nothing outside the namespace changes.
#
# Arguments: REPO WORK VGPUD SIMROOT CALLS. CALLS has one call a line:
# `METHOD<TAB>INTERFACE.MEMBER<TAB>OBJECT<TAB>ARGS...` (gdbus call's argument syntax).
# Each call is made as root, as the broker and as nobody; prints
# `RESULT<TAB>caller<TAB>METHOD<TAB>ok|<D-Bus error name><TAB>message` per call.
set -euo pipefail
repo=$1 work=$2 vgpud=$3 simroot=$4 calls=$5
chmod 755 "$work"
mkdir -p "$work"/{actions,rules,empty,bus}
chmod 755 "$work"/{actions,rules,empty,bus}
install -m 0644 "$repo/polkit/org.vgpud1.policy" "$work/actions/"
install -m 0644 "$repo/polkit/50-org.vgpud1.rules" "$work/rules/"
mount --bind "$work/actions" /usr/share/polkit-1/actions
mount --bind "$work/rules" /etc/polkit-1/rules.d
mount --bind "$work/empty" /usr/share/polkit-1/rules.d
cp /etc/passwd "$work/passwd"
cp /etc/group "$work/group"
echo "vgpud-broker:x:64900:64900:vgpud test broker:/nonexistent:/usr/sbin/nologin" >>"$work/passwd"
echo "vgpud-broker:x:64900:" >>"$work/group"
grep -q '^vgpud:' "$work/group" || echo "vgpud:x:64901:vgpud-broker" >>"$work/group"
sed -i 's/^\(vgpud:[^:]*:[0-9]*:\)$/\1vgpud-broker/' "$work/group"
chmod 644 "$work/passwd" "$work/group"
mount --bind "$work/passwd" /etc/passwd
mount --bind "$work/group" /etc/group

socket=$work/bus/socket
cat >"$work/bus.conf" <<CONF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$socket</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_destination="org.freedesktop.DBus"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
  </policy>
  <include>/usr/share/dbus-1/system.d/org.freedesktop.PolicyKit1.conf</include>
  <include>$repo/dbus/org.vgpud1.conf</include>
</busconfig>
CONF
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
dbus-daemon --config-file="$work/bus.conf" --nofork >"$work/dbus.log" 2>&1 &
pids+=($!)
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$socket
wait_for() {
  for _ in $(seq 1 200); do
    if busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" list --no-pager 2>/dev/null | grep -q "^$1 "; then return 0; fi
    sleep 0.05
  done
  echo "namespace: $1 did not appear on the bus" >&2
  return 1
}
for _ in $(seq 1 100); do [ -S "$socket" ] && break; sleep 0.05; done
chmod 755 "$work/bus"
/usr/lib/polkit-1/polkitd --no-debug >"$work/polkitd.log" 2>&1 &
pids+=($!)
wait_for org.freedesktop.PolicyKit1 || { cat "$work/polkitd.log" >&2; exit 1; }
"$vgpud" --root "$simroot" --simulate >"$work/vgpud.log" 2>&1 &
pids+=($!)
wait_for org.vgpud1 || { cat "$work/vgpud.log" >&2; exit 1; }
echo "READY polkitd and vgpud are on the bus"

run_as() {
  case $1 in
    root) shift; "$@" ;;
    broker) shift; setpriv --reuid=vgpud-broker --regid=vgpud-broker --init-groups "$@" ;;
    nobody) shift; setpriv --reuid=65534 --regid=65534 --clear-groups "$@" ;;
  esac
}
for caller in root broker nobody; do
  while IFS=$'\t' read -r method member object args; do
    [ -n "$method" ] || continue
    # shellcheck disable=SC2086 # ARGS are separate gdbus arguments
    eval "set -- $args"
    out=$(run_as "$caller" gdbus call --system --dest org.vgpud1 --object-path "$object" \
      --method "$member" "$@" 2>&1) && rc=0 || rc=$?
    if [ $rc -eq 0 ]; then
      printf 'RESULT\t%s\t%s\tok\t\n' "$caller" "$method"
    else
      name=$(printf '%s' "$out" | sed -n 's/.*GDBus\.Error:\([A-Za-z0-9_.]*\):.*/\1/p' | head -n 1)
      printf 'RESULT\t%s\t%s\t%s\t%s\n' "$caller" "$method" "${name:-unknown}" "$(printf '%s' "$out" | tr '\n\t' '  ' | cut -c1-300)"
    fi
  done <"$calls"
done
echo "AUDIT $(grep -c 'audit' "$work/vgpud.log" || true)"
