#!/usr/bin/env bash
# vgpud's Cockpit page in a real browser (tests/cockpit_page.rs): in a private mount namespace,
# a system-type dbus-daemon with the project's bus policy, the real polkitd and vgpud on a
# simulated host (tests/polkit/system-bus.sh); cockpit-ws with a local session
# (cockpit-bridge, no login) on loopback, as root, as a broker user in the group vgpud and as
# nobody (not in the group), each bridge on the private bus as its system bus and with the repository's cockpit/
# as the package vgpud; then tests/cockpit/page.py drives headless Chromium through them.
#
# Arguments: REPO WORK VGPUD SIMROOT VGPUCTL SCREENSHOTS PORT_ROOT PORT_BROKER PORT_NOBODY
set -euo pipefail
repo=$1 work=$2 vgpud=$3 simroot=$4 vgpuctl=$5 shots=$6 port_root=$7 port_broker=$8 port_nobody=$9
# shellcheck source=tests/polkit/system-bus.sh
. "$repo/tests/polkit/system-bus.sh"
start_system_bus "$repo" "$work" "$vgpud" "$simroot" vgpud-broker 64900
# page.py stops vgpud and starts it again (as a restart or an upgrade does); the one it starts
# writes its pid here for the trap below.
vgpud_pid=${pids[2]}
trap 'for p in "${pids[@]}" $(cat "$work/vgpud-again.pid" 2>/dev/null); do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT

# The package as tools/install puts it in /usr/share/cockpit/vgpud, here through
# XDG_DATA_DIRS, which the bridge reads its packages from.
mkdir -p "$work/share/cockpit"
cp -r "$repo/cockpit" "$work/share/cockpit/vgpud"
chmod -R a+rX "$work/share"

start_ws() {
  local port=$1
  shift
  XDG_DATA_DIRS="$work/share:/usr/share" HOME="$work/home-$port" XDG_RUNTIME_DIR="$work/run-$port" \
    "$@" /usr/lib/cockpit/cockpit-ws --no-tls --address 127.0.0.1 --port "$port" \
    --local-session=cockpit-bridge >"$work/cockpit-ws-$port.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "cockpit-ws did not listen on $port:" >&2
  cat "$work/cockpit-ws-$port.log" >&2
  exit 1
}
for port in "$port_root" "$port_broker" "$port_nobody"; do
  mkdir -p "$work/home-$port" "$work/run-$port"
  chmod 700 "$work/run-$port"
done
chown 64900:64900 "$work/home-$port_broker" "$work/run-$port_broker"
chown 65534:65534 "$work/home-$port_nobody" "$work/run-$port_nobody"
start_ws "$port_root"
start_ws "$port_broker" setpriv --reuid=vgpud-broker --regid=vgpud-broker --init-groups
start_ws "$port_nobody" setpriv --reuid=65534 --regid=65534 --clear-groups
echo "READY cockpit-ws on $port_root (root), $port_broker (vgpud-broker, in the group vgpud) and $port_nobody (nobody)"

rc=0
env -u PYTHONPATH -u PYTHONHOME /usr/bin/python3 -I "$repo/tests/cockpit/page.py" \
  --root-url "http://127.0.0.1:$port_root" --broker-url "http://127.0.0.1:$port_broker" --nobody-url "http://127.0.0.1:$port_nobody" \
  --bus "$DBUS_SYSTEM_BUS_ADDRESS" --vgpuctl "$vgpuctl" --screenshots "$shots" \
  --vgpud "$vgpud" --vgpud-pid "$vgpud_pid" --simroot "$simroot" --work "$work" || rc=$?
if [ $rc -ne 0 ]; then
  for log in "$work"/cockpit-ws-*.log "$work"/vgpud*.log; do
    echo "---- $log (last lines)"
    tail -n 30 "$log"
  done
fi
exit $rc
