#!/usr/bin/python3
"""A VDI broker's login storm against vgpud (org.vgpud1) and libvirt.

Each of N users logs in at once (K at a time, on K threads): the broker asks vgpud how many
more of the type the host can take (GetCapacity), makes the user a transient vGPU owned by
the user (CreateDevice with owner and persistent=false), has vgpud render a VDI domain for it
(RenderDomain), defines that domain in libvirt and starts it. A user the host has no room
for is refused for capacity: either GetCapacity said 0, or a concurrent user took the last
device between GetCapacity and CreateDevice (org.vgpud1.Error.NoCapacity). With --logout,
every served user then logs out: the domain is destroyed and undefined and the vGPU
removed (RemoveDevice).

At the end it prints a summary: users served, refused for capacity, errors, and the time
per login (GetCapacity to a running domain) at the 50th and 99th percentile. It exits 0
when every user was either served or refused for capacity, 1 when anything else failed, 2
when it could not start (no bus, no libvirt, a type no GPU offers, bad arguments).

Requires Debian's python3 with python3-dbus and python3-libvirt.

Examples:
    # 40 users, 8 logging in at a time, against the system bus and qemu:///system:
    /usr/bin/python3 examples/broker.py --users 40 --concurrency 8 --type RTX6000-4Q --logout
    # CI: a private bus with vgpud on a simulated host, libvirt's test driver:
    /usr/bin/python3 examples/broker.py --users 40 --concurrency 8 --type RTX6000-4Q \\
        --bus-address unix:path=/tmp/bus --libvirt-uri test:///default --logout
"""

import argparse
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

try:
    import dbus
except ImportError:
    sys.exit("broker.py: python3-dbus is missing (apt-get install python3-dbus)")
try:
    import libvirt
except ImportError:
    libvirt = None
if libvirt is None or not hasattr(libvirt, "open"):
    # A directory named "libvirt" on sys.path (this repository has one) is not the binding.
    sys.exit("broker.py: python3-libvirt is missing (apt-get install python3-libvirt)")

BUS_NAME = "org.vgpud1"
MANAGER_PATH = "/org/vgpud1"
MANAGER = "org.vgpud1.Manager"
NO_CAPACITY = "org.vgpud1.Error.NoCapacity"
NOT_FOUND = "org.vgpud1.Error.NotFound"
BUSY = "org.vgpud1.Error.Busy"
# Seconds one D-Bus call may take (a create under a storm waits its turn).
CALL_TIMEOUT = 120.0


class Refused(Exception):
    """The host has no room for this user now."""


class Vgpud:
    """org.vgpud1's manager over one private connection (one per thread: every worker has
    its own socket, so the storm really is concurrent on the bus)."""

    def __init__(self, address):
        if address:
            self.bus = dbus.bus.BusConnection(address)
        else:
            # libdbus honours DBUS_SYSTEM_BUS_ADDRESS for the system bus.
            self.bus = dbus.bus.BusConnection(dbus.bus.BusConnection.TYPE_SYSTEM)

    def call(self, method, signature, *args):
        return self.bus.call_blocking(
            BUS_NAME, MANAGER_PATH, MANAGER, method, signature, args, timeout=CALL_TIMEOUT
        )

    def get_capacity(self, type_):
        return int(self.call("GetCapacity", "sa{sv}", type_, {}))

    def create_device(self, type_, owner):
        uuid, _path = self.call(
            "CreateDevice",
            "sa{sv}",
            type_,
            {"owner": dbus.String(owner), "persistent": dbus.Boolean(False)},
        )
        return str(uuid)

    def render_domain(self, name, uuids, options):
        return str(self.call("RenderDomain", "sasa{sv}", name, dbus.Array(uuids, "s"), options))

    def remove_device(self, uuid):
        """Removes the device; one already gone is fine (libvirt's hook, vgpud's
        `libvirt/hooks/qemu.d/vgpud`, removes a domain's transient devices at `release end`).
        A device the guest still holds for a moment is tried again."""
        for attempt in range(20):
            try:
                self.call("RemoveDevice", "sa{sv}", uuid, {})
                return
            except dbus.exceptions.DBusException as e:
                if e.get_dbus_name() == NOT_FOUND:
                    return
                if e.get_dbus_name() == BUSY and attempt < 19:
                    time.sleep(0.1 * (attempt + 1))
                    continue
                raise

    def list_devices(self):
        return [(str(u), str(parent), str(owner)) for u, parent, _t, owner, _p in
                self.call("ListDevices", "")]

    def close(self):
        self.bus.close()


def dbus_error_text(e):
    """`org.vgpud1.Error.X: message`."""
    return "%s: %s" % (e.get_dbus_name(), e.get_dbus_message())


class Broker:
    def __init__(self, args):
        self.args = args
        self.local = threading.local()
        self.lock = threading.Lock()
        self.served = {}  # user -> (uuid, domain name)
        self.refused = {}  # user -> why
        self.errors = {}  # user -> what failed
        self.login_seconds = []
        self.logout_errors = {}
        self.logout_seconds = []
        # One libvirt connection for all threads (libvirt's connections are thread-safe and
        # the binding releases the GIL in every call).
        self.virt = libvirt.open(args.libvirt_uri)
        self.all_vgpud = []

    def vgpud(self):
        v = getattr(self.local, "vgpud", None)
        if v is None:
            v = Vgpud(self.args.bus_address)
            self.local.vgpud = v
            with self.lock:
                self.all_vgpud.append(v)
        return v

    def say(self, text):
        if not self.args.quiet:
            with self.lock:
                print(text, flush=True)

    def render_options(self):
        opts = {
            "memory_mib": dbus.UInt32(self.args.memory_mib),
            "vcpus": dbus.UInt32(self.args.vcpus),
        }
        if self.args.template:
            opts["template"] = dbus.String(self.args.template)
        if self.args.graphics:
            opts["graphics"] = dbus.String(self.args.graphics)
        return opts

    def login(self, user):
        """One user's login: capacity, device, domain, start. Returns nothing; records the
        outcome."""
        v = self.vgpud()
        start = time.monotonic()
        uuid = None
        domain = None
        step = "GetCapacity"
        try:
            if v.get_capacity(self.args.type) == 0:
                raise Refused("no capacity (GetCapacity says 0)")
            step = "CreateDevice"
            try:
                uuid = v.create_device(self.args.type, user)
            except dbus.exceptions.DBusException as e:
                if e.get_dbus_name() == NO_CAPACITY:
                    # Another user took the last one since GetCapacity.
                    raise Refused("no capacity (CreateDevice: %s)" % e.get_dbus_message())
                raise
            step = "RenderDomain"
            xml = v.render_domain(user, [uuid], self.render_options())
            step = "libvirt defineXML"
            try:
                self.virt.lookupByName(user)
                raise RuntimeError("libvirt already has a domain %r; not touching it" % user)
            except libvirt.libvirtError as e:
                if e.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise
            domain = self.virt.defineXML(xml)
            step = "libvirt create (start)"
            domain.create()
        except Refused as why:
            with self.lock:
                self.refused[user] = str(why)
            self.say("%s: refused: %s" % (user, why))
            return
        except Exception as e:  # noqa: BLE001 - every failure is reported, none is fatal
            what = dbus_error_text(e) if isinstance(e, dbus.exceptions.DBusException) else str(e)
            with self.lock:
                self.errors[user] = "%s: %s" % (step, what)
            self.say("%s: ERROR at %s: %s" % (user, step, what))
            self.undo(user, uuid, domain)
            return
        elapsed = time.monotonic() - start
        with self.lock:
            self.served[user] = (uuid, user)
            self.login_seconds.append(elapsed)
        self.say("%s: served: vGPU %s, domain %s running (%.1f ms)"
                 % (user, uuid, user, elapsed * 1000))

    def undo(self, user, uuid, domain):
        """After a failed login: nothing the user got stays behind."""
        try:
            if domain is not None:
                if domain.isActive():
                    domain.destroy()
                domain.undefine()
        except libvirt.libvirtError as e:
            self.say("%s: cleanup: libvirt: %s" % (user, e))
        try:
            if uuid is not None:
                self.vgpud().remove_device(uuid)
        except dbus.exceptions.DBusException as e:
            self.say("%s: cleanup: RemoveDevice %s: %s" % (user, uuid, dbus_error_text(e)))

    def logout(self, user):
        uuid, name = self.served[user]
        start = time.monotonic()
        step = "libvirt lookup"
        try:
            domain = self.virt.lookupByName(name)
            step = "libvirt destroy"
            if domain.isActive():
                domain.destroy()
            step = "libvirt undefine"
            domain.undefine()
            step = "RemoveDevice"
            self.vgpud().remove_device(uuid)
        except Exception as e:  # noqa: BLE001
            what = dbus_error_text(e) if isinstance(e, dbus.exceptions.DBusException) else str(e)
            with self.lock:
                self.logout_errors[user] = "%s: %s" % (step, what)
            self.say("%s: ERROR at logout, %s: %s" % (user, step, what))
            return
        with self.lock:
            self.logout_seconds.append(time.monotonic() - start)
        self.say("%s: logged out: domain gone, vGPU %s removed" % (user, uuid))

    def storm(self, users, work):
        with ThreadPoolExecutor(max_workers=self.args.concurrency) as pool:
            # list(): re-raise anything that escaped a worker.
            list(pool.map(work, users))

    def close(self):
        for v in self.all_vgpud:
            v.close()
        self.virt.close()


def percentile(values, p):
    """Nearest-rank percentile of `values` (seconds) in milliseconds, or None."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))  # ceil(n * p / 100)
    return ordered[int(rank) - 1] * 1000


def fmt_ms(ms):
    return "-" if ms is None else "%.1f ms" % ms


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="A VDI broker's login storm against vgpud (org.vgpud1) and libvirt.")
    p.add_argument("--users", type=int, default=10, metavar="N",
                   help="how many users log in (default 10)")
    p.add_argument("--type", required=True, metavar="TYPE",
                   help="the vGPU type: an id (nvidia-259), a name (GRID RTX6000-4Q) or a name "
                        "without its vendor prefix (RTX6000-4Q)")
    p.add_argument("--concurrency", type=int, default=4, metavar="K",
                   help="how many users log in at the same time, each on its own thread and "
                        "bus connection (default 4)")
    p.add_argument("--bus-address", metavar="ADDRESS",
                   help="the D-Bus address vgpud is on (default: the system bus, "
                        "DBUS_SYSTEM_BUS_ADDRESS if set)")
    p.add_argument("--libvirt-uri", default="qemu:///system", metavar="URI",
                   help="libvirt's URI (default qemu:///system; test:///default for a dry run)")
    p.add_argument("--logout", action="store_true",
                   help="after the storm, every served user logs out: the domain is destroyed "
                        "and undefined, the vGPU removed")
    p.add_argument("--prefix", default="user-",
                   help="users (device owners and domain names) are PREFIX1..PREFIXN "
                        "(default user-)")
    p.add_argument("--memory-mib", type=int, default=4096, help="guest memory (default 4096)")
    p.add_argument("--vcpus", type=int, default=2, help="guest vCPUs (default 2)")
    p.add_argument("--template", help="RenderDomain's template (default: vgpud's, vdi)")
    p.add_argument("--graphics", choices=["vnc", "spice"], help="RenderDomain's graphics")
    p.add_argument("--quiet", action="store_true", help="only the summary")
    args = p.parse_args(argv)
    if args.users < 1 or args.concurrency < 1:
        p.error("--users and --concurrency must be at least 1")
    return args


def main(argv):
    args = parse_args(argv)
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # errors come as exceptions
    try:
        probe = Vgpud(args.bus_address)
        capacity = probe.get_capacity(args.type)
    except dbus.exceptions.DBusException as e:
        print("broker.py: cannot ask vgpud for %s: %s" % (args.type, dbus_error_text(e)),
              file=sys.stderr)
        return 2
    try:
        broker = Broker(args)
    except libvirt.libvirtError as e:
        print("broker.py: cannot open libvirt at %s: %s" % (args.libvirt_uri, e),
              file=sys.stderr)
        return 2
    users = ["%s%d" % (args.prefix, i) for i in range(1, args.users + 1)]
    print("login storm: %d users, %d at a time, type %s; the host can take %d more"
          % (len(users), args.concurrency, args.type, capacity), flush=True)

    t0 = time.monotonic()
    broker.storm(users, broker.login)
    storm_seconds = time.monotonic() - t0
    capacity_after = probe.get_capacity(args.type)
    held = sorted(u for u, _p, owner in probe.list_devices() if owner in broker.served)

    if args.logout:
        broker.storm(sorted(broker.served), broker.logout)
        remaining = [u for u, _p, owner in probe.list_devices() if owner in users]
        capacity_end = probe.get_capacity(args.type)
    broker.close()
    probe.close()

    s = broker
    print("summary:")
    print("  users: %d" % len(users))
    print("  served: %d" % len(s.served))
    print("  refused for capacity: %d" % len(s.refused))
    print("  errors: %d" % len(s.errors))
    print("  capacity before: %d" % capacity)
    print("  capacity after logins: %d" % capacity_after)
    print("  devices held after logins: %d" % len(held))
    print("  login storm: %.2f s" % storm_seconds)
    print("  login p50: %s" % fmt_ms(percentile(s.login_seconds, 50)))
    print("  login p99: %s" % fmt_ms(percentile(s.login_seconds, 99)))
    if args.logout:
        print("  logout errors: %d" % len(s.logout_errors))
        print("  logout p50: %s" % fmt_ms(percentile(s.logout_seconds, 50)))
        print("  logout p99: %s" % fmt_ms(percentile(s.logout_seconds, 99)))
        print("  devices left after logout: %d" % len(remaining))
        print("  capacity after logout: %d" % capacity_end)
    for user in sorted(s.errors):
        print("  error: %s: %s" % (user, s.errors[user]))
    for user in sorted(s.logout_errors):
        print("  logout error: %s: %s" % (user, s.logout_errors[user]))

    ok = (len(s.served) + len(s.refused) == len(users) and not s.errors
          and not (args.logout and (s.logout_errors or remaining)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
