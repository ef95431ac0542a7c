"""A python3-dbus (dbus-python, Debian package python3-dbus) client of org.vgpud1, as an oVirt
VDSM hook would use it: a proxy and dbus.Interface, plain Python values for a{sv} options
(python3-dbus takes the signature sa{sv} from the introspection data, and in each variant
sends a str as s, an int as i, a bool as b; without usable introspection data it guesses
sa{ss} for {"owner": "x"}), and the GLib main loop (dbus.mainloop.glib) for signals.

Usage: /usr/bin/python3 python3_dbus.py BUS_ADDRESS
"""

import logging
import uuid as uuidlib
import xml.etree.ElementTree as ET

import dbus
import dbus.mainloop.glib

from clientcheck import (
    DEVICE,
    GPU,
    INTROSPECTABLE,
    MANAGER,
    MANAGER_PATH,
    OBJECT_MANAGER,
    PROPERTIES,
    Checks,
    bus_address,
    check_one_change_per_object,
    glib_drain,
    glib_quiet,
    glib_wait,
)

c = Checks("python3-dbus client")


class IntrospectErrors(logging.Handler):
    """python3-dbus only logs a failed implicit introspection (then guesses signatures)."""

    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


introspect_errors = IntrospectErrors()
logging.getLogger("dbus.proxies").addHandler(introspect_errors)

dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.bus.BusConnection(bus_address())


def plain(v):
    """dbus-python values as plain Python (Boolean before int: it is an int subclass)."""
    if isinstance(v, dbus.Boolean):
        return bool(v)
    if isinstance(v, (dbus.Byte, dbus.Int16, dbus.UInt16, dbus.Int32, dbus.UInt32,
                      dbus.Int64, dbus.UInt64)):
        return int(v)
    if isinstance(v, dbus.Double):
        return float(v)
    if isinstance(v, (dbus.String, dbus.ObjectPath, dbus.Signature)):
        return str(v)
    if isinstance(v, dict):
        return {plain(k): plain(x) for k, x in v.items()}
    if isinstance(v, dbus.Struct) or isinstance(v, tuple):
        return tuple(plain(x) for x in v)
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


# Every signal of vgpud, in arrival order.
events = []


def on_properties_changed(iface, changed, invalidated, path=None):
    events.append(("props", str(path), (str(iface), plain(changed), plain(invalidated))))


def on_interfaces_added(path, ifaces):
    events.append(("added", str(path), plain(ifaces)))


def on_interfaces_removed(path, ifaces):
    events.append(("removed", str(path), plain(ifaces)))


def on_device_created(uuid, path):
    events.append(("created", str(path), str(uuid)))


bus.add_signal_receiver(on_properties_changed, signal_name="PropertiesChanged",
                        dbus_interface=PROPERTIES, bus_name="org.vgpud1", path_keyword="path")
bus.add_signal_receiver(on_interfaces_added, signal_name="InterfacesAdded",
                        dbus_interface=OBJECT_MANAGER, bus_name="org.vgpud1", path=MANAGER_PATH)
bus.add_signal_receiver(on_interfaces_removed, signal_name="InterfacesRemoved",
                        dbus_interface=OBJECT_MANAGER, bus_name="org.vgpud1", path=MANAGER_PATH)
bus.add_signal_receiver(on_device_created, signal_name="DeviceCreated",
                        dbus_interface=MANAGER, bus_name="org.vgpud1", path=MANAGER_PATH)

obj = bus.get_object("org.vgpud1", MANAGER_PATH)
mgr = dbus.Interface(obj, MANAGER)


def start_mark():
    """Where the signals of the next call start: after everything that came before."""
    glib_drain()
    return len(events)


def since(mark, kind, path=None):
    return [e for e in events[mark:] if e[0] == kind and (path is None or e[1] == path)]


def props_signals(mark):
    return [(e[1],) + e[2] for e in events[mark:] if e[0] == "props"]


def get_all(path, iface):
    o = bus.get_object("org.vgpud1", path)
    return plain(dbus.Interface(o, PROPERTIES).GetAll(iface))


def error_name(e):
    return e.get_dbus_name() if isinstance(e, dbus.exceptions.DBusException) else repr(e)


def expect_error(what, name, fn, *args):
    try:
        r = fn(*args)
    except dbus.exceptions.DBusException as e:
        c.equal(e.get_dbus_name(), name, f"{what}: refused with {name}")
        return e
    c.check(False, f"{what}: refused with {name}", f"it returned {plain(r)!r}")
    return None


state = {}


def implicit_introspection():
    # python3-dbus introspects the object behind the proxy by itself, and the first call
    # waits for that; a failure is only logged, and then it guesses signatures.
    gpus = mgr.ListGpus()
    c.check(len(gpus) > 0, "ListGpus through the proxy")
    c.check(not introspect_errors.records, "the implicit introspection of /org/vgpud1 parsed",
            "; ".join(introspect_errors.records))
    done = getattr(obj, "INTROSPECT_STATE_INTROSPECT_DONE", 2)
    c.equal(getattr(obj, "_introspect_state", None), done,
            "python3-dbus finished its introspection of /org/vgpud1")
    method_map = getattr(obj, "_introspect_method_map", {})
    c.equal(method_map.get(MANAGER + ".CreateDevice"), "sa{sv}",
            "python3-dbus learned CreateDevice's signature from the introspection data")


def issue_example():
    # The issue's very call: with the introspection data python3-dbus sends sa{sv}.
    uuid, path = mgr.CreateDevice("mtty-1", {"owner": "x"})
    c.check(True, 'mgr.CreateDevice("mtty-1", {"owner": "x"}) with plain values is accepted')
    c.check(any(str(d[0]) == str(uuid) for d in mgr.ListDevices()), "ListDevices lists it")
    mgr.RemoveDevice(uuid, {})
    c.check(all(str(d[0]) != str(uuid) for d in mgr.ListDevices()), "RemoveDevice removed it")


def explicit_introspect():
    text = obj.Introspect(dbus_interface=INTROSPECTABLE)
    root = ET.fromstring(str(text))
    c.equal(root.tag, "node", "Introspect of /org/vgpud1 parses with xml.etree, a <node>")
    ifaces = {i.get("name"): i for i in root.findall("interface")}
    for name in (MANAGER, OBJECT_MANAGER, PROPERTIES, INTROSPECTABLE):
        c.check(name in ifaces, f"/org/vgpud1 has interface {name}", sorted(ifaces))
    m = ifaces.get(MANAGER)
    if m is None:
        return
    methods = {x.get("name"): x for x in m.findall("method")}

    def sig(method, direction):
        x = methods.get(method)
        if x is None:
            return None
        return "".join(a.get("type") for a in x.findall("arg")
                       if a.get("direction", "in") == direction)

    for method, ins, outs in [
        ("CreateDevice", "sa{sv}", "so"),
        ("RemoveDevice", "sa{sv}", ""),
        ("ModifyDevice", "sa{sv}", ""),
        ("ListDevices", "", "a(sssso)"),
        ("ListGpus", "", "a(sssso)"),
        ("GetTypeInfo", "sa{sv}", "a{sv}"),
    ]:
        c.equal((sig(method, "in"), sig(method, "out")), (ins, outs),
                f"introspection: {method}({ins}) -> ({outs})")
    signals = {x.get("name") for x in m.findall("signal")}
    c.check({"DeviceCreated", "DeviceRemoved"} <= signals,
            "introspection: DeviceCreated and DeviceRemoved signals", sorted(signals))


def gpus():
    listed = [plain(g) for g in mgr.ListGpus()]
    c.check(len(listed) >= 4, "ListGpus lists the mixed host's GPUs", listed)
    state["gpus"] = {g[4]: get_all(g[4], GPU) for g in listed}
    nodes = {p: props["NumaNode"] for p, props in state["gpus"].items()
             if props["Driver"] == "nvidia"}
    c.equal(sorted(nodes.values()), [0, 1], "the two NVIDIA GPUs sit on NUMA nodes 0 and 1")
    state["node1_gpu"] = next((p for p, n in nodes.items() if n == 1), None)


def create_with_plain_values():
    mark = start_mark()
    before = dict(state["gpus"])
    reply = mgr.CreateDevice("RTX6000-4Q", {"owner": "vm1", "numa_node": 1})
    uuid, path = str(reply[0]), str(reply[1])
    c.check(True, 'CreateDevice("RTX6000-4Q", {"owner": "vm1", "numa_node": 1}) with plain '
                  'values (numa_node goes as i) is accepted')
    c.check(path.startswith("/org/vgpud1/device/"), "CreateDevice returns a device path", path)
    state["uuid"], state["path"] = uuid, path
    glib_wait("InterfacesAdded for the new device", lambda: since(mark, "added", path))
    c.check(True, "InterfacesAdded arrives for the new device")
    dev = get_all(path, DEVICE)
    parent_gpu = dev.get("ParentGpu")
    glib_wait(f"PropertiesChanged on its GPU {parent_gpu}",
              lambda: since(mark, "props", parent_gpu))
    glib_quiet()
    added = since(mark, "added", path)
    c.equal(len(added), 1, "exactly one InterfacesAdded for the new device")
    props = added[0][2].get(DEVICE, {})
    c.equal(props.get("Uuid"), uuid, "InterfacesAdded carries the Device interface and its Uuid")
    c.equal(props.get("Owner"), "vm1", "InterfacesAdded carries Owner")
    c.equal(len(since(mark, "created", path)), 1, "DeviceCreated arrives once")
    after = {p: get_all(p, GPU) for p in before}
    after[path] = dev
    check_one_change_per_object(c, "create", props_signals(mark), {**before, path: props},
                                after, {parent_gpu: {"Devices"}})
    state["gpus"] = {p: after[p] for p in before}
    c.equal(parent_gpu, state["node1_gpu"], "numa_node 1 placed it on the GPU of NUMA node 1")
    c.check(path in after.get(parent_gpu, {}).get("Devices", []), "its GPU's Devices lists it")


def read_device():
    path, uuid = state["path"], state["uuid"]
    dev = get_all(path, DEVICE)
    print(f"    GetAll({DEVICE}) = {dev}")
    c.equal(dev.get("Uuid"), uuid, "Properties.GetAll: Uuid")
    c.equal(dev.get("Owner"), "vm1", "Properties.GetAll: Owner")
    c.equal(dev.get("Kind"), "mdev", "Properties.GetAll: Kind")
    c.check(str(dev.get("TypeName", "")).endswith("RTX6000-4Q"), "Properties.GetAll: TypeName",
            dev.get("TypeName"))
    c.equal((dev.get("Active"), dev.get("Persistent"), dev.get("Autostart")), (True, True, True),
            "Properties.GetAll: Active, Persistent, Autostart")
    rows = [plain(d) for d in mgr.ListDevices() if str(d[0]) == uuid]
    c.equal(len(rows), 1, "ListDevices lists the device once")
    if rows:
        c.equal((rows[0][3], rows[0][4]), ("vm1", path), "ListDevices: owner and path")


def modify(options, expected, changed):
    path = state["path"]
    mark = start_mark()
    before = {path: get_all(path, DEVICE), **state["gpus"]}
    mgr.ModifyDevice(state["uuid"], options)
    label = f"ModifyDevice {options}"
    glib_wait(f"PropertiesChanged after {label}", lambda: since(mark, "props", path))
    glib_quiet()
    after = {path: get_all(path, DEVICE), **{p: get_all(p, GPU) for p in state["gpus"]}}
    for k, v in expected.items():
        c.equal(after[path].get(k), v, f"{label}: {k} is {v}")
    check_one_change_per_object(c, label, props_signals(mark), before, after,
                                {path: changed})
    sigs = [s for s in props_signals(mark) if s[0] == path]
    if sigs:
        c.equal(sigs[0][1], DEVICE, f"{label}: the signal is for {DEVICE}")


def exist_ok():
    u = str(uuidlib.uuid4())
    mark = start_mark()
    first = plain(mgr.CreateDevice("mtty-1", {"uuid": u, "exist_ok": True}))
    c.equal(first[0], u, "CreateDevice with uuid and exist_ok makes the device with that uuid")
    glib_wait("InterfacesAdded for it", lambda: since(mark, "added", first[1]))
    second = plain(mgr.CreateDevice("mtty-1", {"uuid": u, "exist_ok": True}))
    c.equal(second, first, "the same call again returns the same uuid and path")
    glib_quiet()
    c.equal(len(since(mark, "added", first[1])), 1, "the second call adds no object")
    c.equal(len(since(mark, "created", first[1])), 1, "the second call emits no DeviceCreated")
    c.equal(len([d for d in mgr.ListDevices() if str(d[0]) == u]), 1,
            "ListDevices lists it once")
    expect_error("the uuid again without exist_ok", "org.vgpud1.Error.Exists",
                 mgr.CreateDevice, "mtty-1", {"uuid": u})
    expect_error("the uuid again with exist_ok false", "org.vgpud1.Error.Exists",
                 mgr.CreateDevice, "mtty-1", {"uuid": u, "exist_ok": False})
    expect_error("the uuid with exist_ok but another type", "org.vgpud1.Error.Exists",
                 mgr.CreateDevice, "mtty-2", {"uuid": u, "exist_ok": True})
    mgr.RemoveDevice(u, {})
    c.check(all(str(d[0]) != u for d in mgr.ListDevices()), "removed again")


def type_info():
    info = plain(mgr.GetTypeInfo("RTX6000-4Q", {}))
    print(f"    GetTypeInfo(RTX6000-4Q) = {info}")
    c.check(isinstance(info, dict) and all(isinstance(k, str) for k in info),
            "GetTypeInfo returns a{sv}")
    fb = [t[3] for t in mgr.ListTypes() if str(t[2]).endswith("RTX6000-4Q")]
    c.equal(info.get("framebuffer"), int(fb[0]) if fb else 4 << 30,
            "GetTypeInfo framebuffer (bytes, as ListTypes)")
    c.equal(info.get("device_api"), "vfio-pci", "GetTypeInfo device_api (sysfs device_api)")
    c.equal(info.get("heads"), 4, "GetTypeInfo heads (num_heads=4 in the description)")
    c.equal(info.get("max_resolution"), "7680x4320", "GetTypeInfo max_resolution")
    c.equal(info.get("frame_rate_limit"), 60, "GetTypeInfo frame_rate_limit (frl_config=60)")
    c.check(isinstance(info.get("description"), str) and info.get("description"),
            "GetTypeInfo description", info.get("description"))
    for key in ("class", "license"):
        c.check(isinstance(info.get(key), str) and info.get(key),
                f"GetTypeInfo {key} (known for NVIDIA's Q series)", info.get(key))
    mtty = plain(mgr.GetTypeInfo("mtty-1", {"parent": "mtty"}))
    print(f"    GetTypeInfo(mtty-1, parent mtty) = {mtty}")
    c.equal(mtty.get("device_api"), "vfio-pci", "GetTypeInfo of mtty-1 with parent: device_api")
    expect_error("GetTypeInfo of an unknown type", "org.vgpud1.Error.NotFound",
                 mgr.GetTypeInfo, "no-such-type", {})
    expect_error("GetTypeInfo with an unknown option", "org.vgpud1.Error.InvalidArgument",
                 mgr.GetTypeInfo, "mtty-1", {"colour": "blue"})


def remove():
    path, uuid = state["path"], state["uuid"]
    mark = start_mark()
    before = {path: get_all(path, DEVICE), **state["gpus"]}
    parent_gpu = before[path]["ParentGpu"]
    mgr.RemoveDevice(uuid, {})
    glib_wait("InterfacesRemoved for the device", lambda: since(mark, "removed", path))
    glib_wait(f"PropertiesChanged on {parent_gpu}", lambda: since(mark, "props", parent_gpu))
    glib_quiet()
    removed = since(mark, "removed", path)
    c.equal(len(removed), 1, "exactly one InterfacesRemoved for the device")
    c.check(removed and DEVICE in removed[0][2], "InterfacesRemoved names org.vgpud1.Device",
            removed)
    after = {p: get_all(p, GPU) for p in state["gpus"]}
    check_one_change_per_object(c, "remove", props_signals(mark), before, after,
                                {parent_gpu: {"Devices"}})
    try:
        get_all(path, DEVICE)
        c.check(False, "the removed device's object is gone")
    except dbus.exceptions.DBusException as e:
        c.check(True, f"the removed device's object is gone ({error_name(e)})")
    c.check(all(str(d[0]) != uuid for d in mgr.ListDevices()), "ListDevices no longer lists it")


c.step("implicit introspection by the proxy", implicit_introspection)
c.step("the issue's CreateDevice call with plain values", issue_example)
c.step("Introspect, parsed with xml.etree", explicit_introspect)
c.step("ListGpus and Gpu properties", gpus)
c.step("CreateDevice with plain values; InterfacesAdded, PropertiesChanged",
       create_with_plain_values)
if "path" in state:
    c.step("Device properties and ListDevices", read_device)
    c.step("ModifyDevice autostart false", modify, {"autostart": False},
           {"Autostart": False, "Persistent": True}, {"Autostart"})
    c.step("ModifyDevice persistent false", modify, {"persistent": False},
           {"Persistent": False, "Autostart": False}, {"Persistent"})
c.step("CreateDevice exist_ok", exist_ok)
c.step("GetTypeInfo", type_info)
if "path" in state:
    c.step("RemoveDevice; InterfacesRemoved, PropertiesChanged", remove)
c.finish()
