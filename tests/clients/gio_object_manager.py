"""A Gio client of org.vgpud1 (python3-gi with gir1.2-glib-2.0): a GDBusObjectManagerClient
for /org/vgpud1, as GNOME-side tools and GLib-based brokers use it. It makes a proxy for
every object GetManagedObjects returns, so an object without interfaces becomes an empty
proxy; it follows InterfacesAdded/InterfacesRemoved (object-added, object-removed) and each
object's PropertiesChanged (interface-proxy-properties-changed).

Usage: /usr/bin/python3 gio_object_manager.py BUS_ADDRESS
"""

import gi

gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

from clientcheck import (  # noqa: E402
    DEVICE,
    GPU,
    MANAGER,
    MANAGER_PATH,
    Checks,
    bus_address,
    glib_drain,
    glib_quiet,
    glib_wait,
)

c = Checks("Gio object manager client")
NAME = "org.vgpud1"
NVIDIA = "org.vgpud1.Nvidia"
NVIDIA_PATH = "/org/vgpud1/nvidia"
LAYOUTS = "org.vgpud1.Layouts"
LAYOUTS_PATH = "/org/vgpud1/layouts"
# The singleton objects beside the GPUs and devices, each with its one interface.
SINGLETONS = {NVIDIA_PATH: {NVIDIA}, LAYOUTS_PATH: {LAYOUTS}}

conn = Gio.DBusConnection.new_for_address_sync(
    bus_address(),
    Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT
    | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION,
    None,
    None,
)
om = Gio.DBusObjectManagerClient.new_sync(
    conn, Gio.DBusObjectManagerClientFlags.DO_NOT_AUTO_START, NAME, MANAGER_PATH,
    None, None, None)
manager = Gio.DBusProxy.new_sync(conn, Gio.DBusProxyFlags.NONE, None, NAME, MANAGER_PATH,
                                 MANAGER, None)

events = []
# The cached properties of each object as object-added brought it: {path: {iface: {...}}}.
added_with = {}


def cached(obj):
    out = {}
    for iface in obj.get_interfaces():
        out[iface.get_interface_name()] = {
            n: iface.get_cached_property(n).unpack() for n in iface.get_cached_property_names()
        }
    return out


def on_added(_om, obj):
    added_with[obj.get_object_path()] = cached(obj)
    events.append(("added", obj.get_object_path(), obj))


def on_removed(_om, obj):
    events.append(("removed", obj.get_object_path(), obj))


def on_props(_om, obj, iface, changed, invalidated):
    events.append(("props", obj.get_object_path(),
                   (iface.get_interface_name(), changed.unpack(), list(invalidated))))


om.connect("object-added", on_added)
om.connect("object-removed", on_removed)
om.connect("interface-proxy-properties-changed", on_props)


def call(method, signature, args):
    reply = manager.call_sync(method, GLib.Variant(signature, args) if signature else None,
                              Gio.DBusCallFlags.NONE, 10000, None)
    return reply.unpack() if reply is not None else None


def objects():
    """{path: {interface: {property: value}}} of the manager client's object proxies,
    from their caches."""
    return {obj.get_object_path(): cached(obj) for obj in om.get_objects()}


def check_objects(label):
    objs = objects()
    empty = sorted(p for p, ifaces in objs.items() if not ifaces)
    c.equal(empty, [], f"{label}: get_objects() gives no object without interfaces")
    for p in ("/org/vgpud1/gpu", "/org/vgpud1/device"):
        c.check(p not in objs, f"{label}: no proxy for {p}")
    return objs


def start_mark():
    glib_drain()
    return len(events)


def since(mark, kind, path=None):
    return [e for e in events[mark:] if e[0] == kind and (path is None or e[1] == path)]


def check_signals(label, mark, before, expected):
    """At most one interface-proxy-properties-changed per object, carrying only properties
    whose value differs from the cache before (`before`: objects(); for an object added
    meanwhile, what object-added brought), and exactly one, with `expected` among its
    properties, for each object of `expected` {path: set of properties}."""
    sigs = since(mark, "props")
    for path in sorted({s[1] for s in sigs} | set(expected)):
        mine = [s[2] for s in sigs if s[1] == path]
        if not c.equal(len(mine), 1, f"{label}: one properties-changed on {path}"):
            for s in mine:
                print(f"    {s[0]} changed={sorted(s[1])} invalidated={s[2]}")
            continue
        iface, changed, invalidated = mine[0]
        old = before.get(path, added_with.get(path, {})).get(iface, {})
        same = sorted(k for k, v in changed.items() if k in old and old[k] == v)
        c.equal(same, [], f"{label}: the signal on {path} carries no unchanged property")
        c.check(expected.get(path, set()) <= set(changed) | set(invalidated),
                f"{label}: the signal on {path} carries {sorted(expected.get(path, set()))}",
                sorted(changed))


state = {}


def initial():
    c.check(om.get_name_owner() is not None, "the object manager client found vgpud's name")
    objs = check_objects("at start")
    gpus = call("ListGpus", None, None)[0]
    gpu_paths = sorted(g[4] for g in gpus)
    c.equal(sorted(p for p, i in objs.items() if GPU in i), gpu_paths,
            "every GPU of ListGpus has a Gpu object proxy")
    c.check(all(set(i) <= {GPU, DEVICE} or SINGLETONS.get(p) == set(i)
                for p, i in objs.items()),
            "object proxies carry only Gpu and Device interfaces (and the NVIDIA and layouts objects)",
            {p: sorted(i) for p, i in objs.items()})
    mtty = next(g for g in gpus if g[0] == "mtty")
    state["mtty"] = mtty[4]
    c.equal(objs.get(mtty[4], {}).get(GPU, {}).get("Address"), "mtty",
            "the mtty GPU proxy caches its Address")


def create():
    before = objects()
    mark = start_mark()
    options = {"owner": GLib.Variant("s", "gio-vm")}
    uuid, path = call("CreateDevice", "(sa{sv})", ("mtty-1", options))
    state["uuid"], state["path"] = uuid, path
    glib_wait("object-added", lambda: since(mark, "added", path))
    glib_wait(f"properties-changed on {state['mtty']}",
              lambda: since(mark, "props", state["mtty"]))
    glib_quiet()
    c.equal(len(since(mark, "added", path)), 1, "object-added fires once for the new device")
    obj = om.get_object(path)
    iface = obj.get_interface(DEVICE) if obj else None
    c.check(iface is not None, "the new object has a Device interface proxy")
    if iface:
        c.equal(iface.get_cached_property("Owner").unpack(), "gio-vm", "cached Owner")
        c.equal(iface.get_cached_property("Uuid").unpack(), uuid, "cached Uuid")
    added = [e[1] for e in since(mark, "added")]
    c.equal(added, [path], "object-added fires only for the device (no empty objects)")
    check_signals("create", mark, before, {state["mtty"]: {"Devices"}})
    objs = check_objects("with a device")
    c.check(path in objs.get(state["mtty"], {}).get(GPU, {}).get("Devices", []),
            "the GPU proxy's cached Devices lists the device")


def modify():
    path = state["path"]
    before = objects()
    mark = start_mark()
    call("ModifyDevice", "(sa{sv})", (state["uuid"], {"autostart": GLib.Variant("b", False)}))
    glib_wait(f"properties-changed on {path}", lambda: since(mark, "props", path))
    glib_quiet()
    check_signals("ModifyDevice autostart false", mark, before, {path: {"Autostart"}})
    sig = since(mark, "props", path)
    if sig:
        c.equal(sig[0][2][:2], (DEVICE, {"Autostart": False}),
                "the signal carries only Autostart, now false")
    iface = om.get_interface(path, DEVICE)
    c.equal(iface.get_cached_property("Autostart").unpack() if iface else None, False,
            "the cached Autostart is false")


def remove():
    path = state["path"]
    before = objects()
    mark = start_mark()
    call("RemoveDevice", "(sa{sv})", (state["uuid"], {}))
    glib_wait("object-removed", lambda: since(mark, "removed", path))
    glib_wait(f"properties-changed on {state['mtty']}",
              lambda: since(mark, "props", state["mtty"]))
    glib_quiet()
    c.equal([e[1] for e in since(mark, "removed")], [path],
            "object-removed fires for the device only")
    c.check(om.get_object(path) is None, "the device's proxy is gone")
    check_signals("remove", mark, before, {state["mtty"]: {"Devices"}})
    check_objects("after the removal")


def type_info():
    info = call("GetTypeInfo", "(sa{sv})", ("RTX6000-4Q", {}))[0]
    print(f"    GetTypeInfo(RTX6000-4Q) = {info}")
    c.equal(info.get("heads"), 4, "GetTypeInfo over Gio: heads")


c.step("the object manager's objects", initial)
c.step("create: object-added, properties-changed", create)
if "path" in state:
    c.step("modify: properties-changed", modify)
    c.step("remove: object-removed, properties-changed", remove)
c.step("GetTypeInfo", type_info)
c.finish()
