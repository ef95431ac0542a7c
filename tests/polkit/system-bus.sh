# Sourced by the scripts that run in a private mount namespace (tests/polkit/namespace.sh,
# tests/ovirt_hook.rs): the real polkitd, a system-type dbus-daemon with the project's bus
# policy, and vgpud on a simulated host. The project's polkit action and rules files are
# bind-mounted where polkitd reads them (and nothing else: the host's own rules are hidden),
# and a user that is a member of the group vgpud is added to copies of /etc/passwd and
# /etc/group bind-mounted over the real ones (polkit's isInGroup() and dbus-daemon's group
# policy read the group database). Nothing outside the namespace changes.
#
#   start_system_bus REPO WORK VGPUD SIMROOT USER UID
#
# leaves DBUS_SYSTEM_BUS_ADDRESS exported, the daemons' logs in WORK, and their pids in
# `pids`, killed when the script exits.
start_system_bus() {
  local repo=$1 work=$2 vgpud=$3 simroot=$4 user=$5 uid=$6
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
  echo "$user:x:$uid:$uid:vgpud test user:/nonexistent:/usr/sbin/nologin" >>"$work/passwd"
  echo "$user:x:$uid:" >>"$work/group"
  grep -q '^vgpud:' "$work/group" || echo "vgpud:x:$((uid + 1)):" >>"$work/group"
  # Appends the user to the group's members (none yet, or some).
  sed -i "s/^\(vgpud:[^:]*:[0-9]*:\)\(.*\)\$/\1\2,$user/; s/^\(vgpud:[^:]*:[0-9]*:\),/\1/" "$work/group"
  chmod 644 "$work/passwd" "$work/group"
  mount --bind "$work/passwd" /etc/passwd
  mount --bind "$work/group" /etc/group

  local socket=$work/bus/socket
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
  trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT
  dbus-daemon --config-file="$work/bus.conf" --nofork >"$work/dbus.log" 2>&1 &
  pids+=($!)
  export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$socket
  for _ in $(seq 1 100); do [ -S "$socket" ] && break; sleep 0.05; done
  chmod 755 "$work/bus"
  /usr/lib/polkit-1/polkitd --no-debug >"$work/polkitd.log" 2>&1 &
  pids+=($!)
  wait_for_name org.freedesktop.PolicyKit1 || { cat "$work/polkitd.log" >&2; exit 1; }
  "$vgpud" --root "$simroot" --simulate >"$work/vgpud.log" 2>&1 &
  pids+=($!)
  wait_for_name org.vgpud1 || { cat "$work/vgpud.log" >&2; exit 1; }
}

# Waits until NAME is on the bus (10 s at most).
wait_for_name() {
  for _ in $(seq 1 200); do
    if busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" list --no-pager 2>/dev/null | grep -q "^$1 "; then return 0; fi
    sleep 0.05
  done
  echo "namespace: $1 did not appear on the bus" >&2
  return 1
}

# Makes each call of the file CALLS as CALLER, through the command prefix RUN... (setpriv, or
# nothing for root): one call a line, `LABEL<TAB>INTERFACE.MEMBER<TAB>OBJECT<TAB>ARGS` (gdbus
# call's argument syntax); prints `RESULT<TAB>CALLER<TAB>LABEL<TAB>ok|<D-Bus error name><TAB>message`.
#
#   call_each CALLER CALLS [RUN...]
call_each() {
  local caller=$1 calls=$2 method member object args out rc name
  shift 2
  local -a run=("$@")
  while IFS=$'\t' read -r method member object args; do
    [ -n "$method" ] || continue
    # ARGS are separate gdbus arguments.
    eval "set -- $args"
    out=$("${run[@]}" gdbus call --system --dest org.vgpud1 --object-path "$object" \
      --method "$member" "$@" 2>&1) && rc=0 || rc=$?
    if [ $rc -eq 0 ]; then
      printf 'RESULT\t%s\t%s\tok\t\n' "$caller" "$method"
    else
      name=$(printf '%s' "$out" | sed -n 's/.*GDBus\.Error:\([A-Za-z0-9_.]*\):.*/\1/p' | head -n 1)
      printf 'RESULT\t%s\t%s\t%s\t%s\n' "$caller" "$method" "${name:-unknown}" "$(printf '%s' "$out" | tr '\n\t' '  ' | cut -c1-300)"
    fi
  done <"$calls"
}
