"""Shared parts of the real-client scripts in tests/clients/.

Each script is a client of org.vgpud1 written the way an integrator would write it, run by
tests/real_clients.rs with Debian's /usr/bin/python3. It prints every check it makes ("ok:"
or "FAIL:"), and exits non-zero when any failed. A whole run is bounded by an alarm; every
wait for a signal is bounded by its own timeout.
"""

import os
import signal
import sys
import time
import traceback

# How long a signal may take to arrive after the call that causes it.
SIGNAL_TIMEOUT_S = 10.0
# After the expected signals arrived, how long to keep listening for unexpected extra ones
# (the only timed wait: it checks that nothing more comes, which no signal can tell).
QUIET_S = 0.5
# The whole script.
TOTAL_TIMEOUT_S = 150

MANAGER_PATH = "/org/vgpud1"
MANAGER = "org.vgpud1.Manager"
GPU = "org.vgpud1.Gpu"
DEVICE = "org.vgpud1.Device"
PROPERTIES = "org.freedesktop.DBus.Properties"
OBJECT_MANAGER = "org.freedesktop.DBus.ObjectManager"
INTROSPECTABLE = "org.freedesktop.DBus.Introspectable"


class Checks:
    """Counts checks; a failed check is reported and the script goes on (so one run shows
    every failure), a failed `require` stops it."""

    def __init__(self, client):
        self.client = client
        self.passed = 0
        self.failed = []
        signal.signal(signal.SIGALRM, self._timeout)
        signal.alarm(TOTAL_TIMEOUT_S)
        print(f"{client}: python {sys.version.split()[0]} at {sys.executable}", flush=True)

    def _timeout(self, *_):
        print(f"FAIL: {self.client}: the script ran longer than {TOTAL_TIMEOUT_S} s", flush=True)
        os._exit(3)

    def check(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print(f"ok: {what}", flush=True)
        else:
            self.failed.append(what)
            extra = f": {detail}" if detail != "" else ""
            print(f"FAIL: {what}{extra}", flush=True)
        return bool(cond)

    def equal(self, actual, expected, what, context=None):
        detail = f"got {actual!r}, expected {expected!r}"
        if context is not None:
            detail += f" ({context!r})"
        return self.check(actual == expected, what, detail)

    def require(self, cond, what, detail=""):
        if not self.check(cond, what, detail):
            self.finish()

    def step(self, name, fn, *args):
        """Runs one step; an exception fails the step (with its traceback) and the script
        goes on with the next step."""
        print(f"--- {name}", flush=True)
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            self.failed.append(name)
            print(f"FAIL: {name}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc(file=sys.stdout)
            sys.stdout.flush()
            return None

    def finish(self):
        n = len(self.failed)
        print(f"{self.client}: {self.passed} checks ok, {n} failed", flush=True)
        if n:
            print(f"{self.client}: first failure: {self.failed[0]}", flush=True)
            sys.exit(1)
        sys.exit(0)


def bus_address():
    """The bus to use: argv[1], else DBUS_SESSION_BUS_ADDRESS."""
    if len(sys.argv) > 1:
        return sys.argv[1]
    addr = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    if not addr:
        print("FAIL: no bus address (argv[1] or DBUS_SESSION_BUS_ADDRESS)", flush=True)
        sys.exit(2)
    return addr


def glib_wait(what, predicate, timeout=SIGNAL_TIMEOUT_S):
    """Runs the GLib main context until `predicate()` holds; raises after `timeout`."""
    from gi.repository import GLib

    ctx = GLib.MainContext.default()
    deadline = time.monotonic() + timeout
    # A ticker so that an iteration never blocks past the deadline.
    tick = GLib.timeout_add(20, lambda: True)
    try:
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} within {timeout} s")
            ctx.iteration(True)
    finally:
        GLib.source_remove(tick)


def glib_drain():
    """Dispatches what has arrived already (signals of earlier calls), without waiting."""
    from gi.repository import GLib

    ctx = GLib.MainContext.default()
    for _ in range(10000):
        if not ctx.iteration(False):
            return


def glib_quiet(seconds=QUIET_S):
    """Dispatches whatever arrives during `seconds` (to catch signals that must not come)."""
    from gi.repository import GLib

    ctx = GLib.MainContext.default()
    deadline = time.monotonic() + seconds
    tick = GLib.timeout_add(20, lambda: True)
    try:
        while time.monotonic() < deadline:
            ctx.iteration(True)
    finally:
        GLib.source_remove(tick)


def check_one_change_per_object(c, label, signals, before, after, expected_keys):
    """The PropertiesChanged contract for one operation.

    `signals`: list of (path, interface, changed dict, invalidated list) seen during it.
    `before`, `after`: {path: {property: value}} read with GetAll around it (a path missing
    from `after` is gone). `expected_keys`: {path: set of properties that must be among the
    changed}. Each object whose properties changed gets exactly one signal, carrying exactly
    the properties that changed, with their new values; an object where nothing changed gets
    none.
    """
    paths = set(before) | set(after) | {s[0] for s in signals}
    for path in sorted(paths):
        mine = [s for s in signals if s[0] == path]
        old = before.get(path, {})
        new = after.get(path)
        if new is None:
            c.equal(len(mine), 0, f"{label}: no PropertiesChanged on {path}, which is gone")
            continue
        diff = {k for k in new if old.get(k) != new[k]}
        want = expected_keys.get(path, set())
        if want:
            c.check(want <= diff, f"{label}: {sorted(want)} of {path} changed",
                    f"changed: {sorted(diff)}")
        if not diff:
            c.equal(len(mine), 0, f"{label}: no PropertiesChanged on {path} (nothing changed)")
            continue
        if not c.equal(len(mine), 1, f"{label}: exactly one PropertiesChanged on {path}"):
            for s in mine:
                print(f"    signal: {s[1]} changed={sorted(s[2])} invalidated={list(s[3])}")
            continue
        _, iface, changed, invalidated = mine[0]
        c.check(iface in (GPU, DEVICE), f"{label}: the signal on {path} names its interface",
                iface)
        c.equal(sorted(set(changed) | set(invalidated)), sorted(diff),
                f"{label}: the signal on {path} carries exactly the changed properties")
        for k, v in changed.items():
            c.equal(v, new.get(k), f"{label}: {path} {k} carries its new value")
