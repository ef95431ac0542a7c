"""One connection (Gio) makes calls with and without ALLOW_INTERACTIVE_AUTHORIZATION, for
tests/authorization_spec.rs's count of vgpud's questions to polkit. Prints
`CLIENT<TAB>its unique name`, then `CALL<TAB>label<TAB>ok|<D-Bus error name>` per call."""
import sys

import gi

gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
INTERACTIVE = Gio.DBusCallFlags.ALLOW_INTERACTIVE_AUTHORIZATION
BOGUS = "00000000-0000-4000-8000-00000000c0de"
print(f"CLIENT\t{bus.get_unique_name()}", flush=True)


def call(label, member, args, flags):
    try:
        bus.call_sync("org.vgpud1", "/org/vgpud1", "org.vgpud1.Manager", member, args,
                      None, flags, 10000, None)
        outcome = "ok"
    except GLib.Error as e:
        outcome = Gio.DBusError.get_remote_error(e) or e.message
    print(f"CALL\t{label}\t{outcome}", flush=True)


# A read twice: polkit is asked once, the answer kept for the connection.
call("read-1", "ListGpus", None, Gio.DBusCallFlags.NONE)
call("read-2", "ListGpus", None, Gio.DBusCallFlags.NONE)
# A change, allowing interaction, twice: polkit is asked each time (the user might be asked
# a password); its yes is kept, so the change without interaction after them is not asked.
stop = GLib.Variant("(sa{sv})", (BOGUS, {}))
call("manage-interactive-1", "StopDevice", stop, INTERACTIVE)
call("manage-interactive-2", "StopDevice", stop, INTERACTIVE)
call("manage-kept", "StopDevice", stop, Gio.DBusCallFlags.NONE)
# Configuring the host needs the administrator's password (the test's rule): without
# interaction, the caller is told that authenticating would let it in.
vfs = GLib.Variant("(sua{sv})", ("0000:00:00.0", 0, {}))
call("configure", "SetVfCount", vfs, Gio.DBusCallFlags.NONE)
sys.stdout.flush()
