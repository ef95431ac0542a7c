#!/usr/bin/env bash
# How often vgpud asks polkit, under the real polkitd in a private mount namespace
# (tests/polkit/system-bus.sh): run as `unshare --mount --propagation private
# kept_answers.sh ...` by tests/authorization_spec.rs.
#
# Arguments: REPO WORK VGPUD SIMROOT RULES CLIENT. RULES is a polkit .rules file put in
# /etc/polkit-1/rules.d next to the project's before polkitd starts; it may append a line
# to WORK/asks for each question polkitd answers for the user vgpud-counted (polkit.spawn,
# with the file's path written as @ASKS@). CLIENT is a Python program run as that user,
# whose standard output is printed; then prints `ASK<TAB>line` for each line of WORK/asks,
# the credentials asked of the bus meanwhile (MONITOR, below) and vgpud's audit lines
# (`AUDIT<TAB>line`).
# Then polkitd is stopped and ListGpus called once more, by new connections, as the user
# and as root: `GONE<TAB>user|root<TAB>ok|<error name><TAB>message`.
set -euo pipefail
repo=$1 work=$2 vgpud=$3 simroot=$4 rules=$5 client=$6
# shellcheck source=tests/polkit/system-bus.sh
. "$repo/tests/polkit/system-bus.sh"
mkdir -p "$work/rules"
: >"$work/asks"
chmod 0666 "$work/asks"
sed "s|@ASKS@|$work/asks|g" "$rules" >"$work/rules/$(basename "$rules")"
chmod 0644 "$work/rules/$(basename "$rules")"
start_system_bus "$repo" "$work" "$vgpud" "$simroot" vgpud-counted 64920
echo "READY polkitd and vgpud are on the bus"
# Who asks the bus for whose credentials while the client calls: `MONITOR<TAB>sender
# <TAB>connection` per GetConnectionCredentials, and `VGPUD<TAB>vgpud's unique name`.
printf 'VGPUD\t%s\n' "$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" call org.freedesktop.DBus \
  /org/freedesktop/DBus org.freedesktop.DBus GetNameOwner s org.vgpud1 | sed 's/^s "\(.*\)"$/\1/')"
dbus-monitor --address "$DBUS_SYSTEM_BUS_ADDRESS" \
  "type='method_call',interface='org.freedesktop.DBus',member='GetConnectionCredentials'" \
  >"$work/monitor" 2>&1 &
monitor=$!
pids+=("$monitor")
for _ in $(seq 1 100); do grep -q NameAcquired "$work/monitor" 2>/dev/null && break; sleep 0.05; done
# The client runs in a cgroup of its own, named like a systemd scope, which vgpud's audit
# lines name as the caller's unit (`UNIT<TAB>name`).
cgroup2=$(findmnt -n -t cgroup2 -o TARGET | head -n 1)
[ -n "$cgroup2" ] || { echo "kept_answers: no cgroup2 file system is mounted" >&2; exit 1; }
unit=vgpud-test-$$.scope
mkdir "$cgroup2/$unit"
printf 'UNIT\t%s\n' "$unit"
rc=0
sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cgroup2/$unit" \
  setpriv --reuid=vgpud-counted --regid=vgpud-counted --init-groups /usr/bin/python3 "$client" || rc=$?
rmdir "$cgroup2/$unit"
[ $rc -eq 0 ] || exit $rc
grep -a 'audit: ' "$work/vgpud.log" | sed 's/^/AUDIT\t/' || true
sed 's/^/ASK\t/' "$work/asks"
kill "$monitor"
wait "$monitor" 2>/dev/null || true
# A call's header line names its sender; its first argument follows (string ":1.N").
awk '/member=GetConnectionCredentials/ { match($0, /sender=[^ ]*/); sender = substr($0, RSTART + 7, RLENGTH - 7); next }
     sender != "" && /^ *string "/ { gsub(/^ *string "|"$/, ""); printf "MONITOR\t%s\t%s\n", sender, $0; sender = "" }' "$work/monitor"
kill "${pids[1]}" # polkitd (start_system_bus: the bus, polkitd, vgpud)
wait "${pids[1]}" 2>/dev/null || true
gone() { # CALLER RUN...: ListGpus through gdbus, once polkitd is gone
  local caller=$1 out rc
  shift
  out=$("$@" gdbus call --system --dest org.vgpud1 --object-path /org/vgpud1 \
    --method org.vgpud1.Manager.ListGpus 2>&1) && rc=0 || rc=$?
  if [ $rc -eq 0 ]; then out=ok; fi
  printf 'GONE\t%s\t%s\n' "$caller" "$(printf '%s' "$out" | tr '\n\t' '  ' | cut -c1-400)"
}
gone user setpriv --reuid=vgpud-counted --regid=vgpud-counted --init-groups
gone root
