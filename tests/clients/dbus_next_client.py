"""A dbus-next client of org.vgpud1 (pure Python, asyncio; Debian 12 package
python3-dbus-next 0.2.3): bus.introspect of the manager, a GPU and a device (dbus-next parses
the XML strictly with xml.etree and refuses malformed data with a ParseError), proxies built
from that data, calls, and a PropertiesChanged subscription.

Usage: /usr/bin/python3 dbus_next_client.py BUS_ADDRESS
"""

import asyncio

from dbus_next import Variant
from dbus_next.aio import MessageBus
from dbus_next.errors import DBusError

from clientcheck import (
    DEVICE,
    GPU,
    MANAGER,
    MANAGER_PATH,
    OBJECT_MANAGER,
    QUIET_S,
    SIGNAL_TIMEOUT_S,
    Checks,
    bus_address,
)

c = Checks("dbus-next client")
NAME = "org.vgpud1"


def unwrap(v):
    if isinstance(v, Variant):
        return unwrap(v.value)
    if isinstance(v, dict):
        return {k: unwrap(x) for k, x in v.items()}
    if isinstance(v, list):
        return [unwrap(x) for x in v]
    return v


def iface_of(node, name):
    return next((i for i in node.interfaces if i.name == name), None)


def method_sig(iface, name):
    m = next((m for m in iface.methods if m.name == name), None) if iface else None
    return (m.in_signature, m.out_signature) if m else None


async def introspect(bus, path, iface, what):
    """bus.introspect, which parses the XML as dbus-next does (this is what raised
    ParseError on vgpud's comments)."""
    node = await asyncio.wait_for(bus.introspect(NAME, path), SIGNAL_TIMEOUT_S)
    c.check(True, f"bus.introspect of {what} ({path}) parses")
    c.check(iface_of(node, iface) is not None, f"{what} has interface {iface}",
            [i.name for i in node.interfaces])
    return node


async def expect_error(what, name, coro):
    try:
        r = await coro
    except DBusError as e:
        c.equal(e.type, name, f"{what}: refused with {name}")
        return
    c.check(False, f"{what}: refused with {name}", f"it returned {r!r}")


async def main():
    bus = await MessageBus(bus_address=bus_address()).connect()
    state = {}

    async def manager():
        node = await introspect(bus, MANAGER_PATH, MANAGER, "the manager")
        m = iface_of(node, MANAGER)
        for method, sig in [
            ("CreateDevice", ("sa{sv}", "so")),
            ("RemoveDevice", ("sa{sv}", "")),
            ("ListDevices", ("", "a(sssso)")),
            ("GetTypeInfo", ("sa{sv}", "a{sv}")),
        ]:
            c.equal(method_sig(m, method), sig, f"the manager's {method} signature")
        c.check(iface_of(node, OBJECT_MANAGER) is not None, "the manager is an ObjectManager")
        obj = bus.get_proxy_object(NAME, MANAGER_PATH, node)
        state["mgr"] = obj.get_interface(MANAGER)
        state["om"] = obj.get_interface(OBJECT_MANAGER)
        version = await state["mgr"].get_version()
        c.check(isinstance(version, str) and version, "the Version property reads", version)

    async def gpu():
        gpus = await state["mgr"].call_list_gpus()
        c.check(len(gpus) >= 4, "ListGpus through the proxy", gpus)
        mtty = next((g for g in gpus if g[0] == "mtty"), None)
        c.require(mtty is not None, "the mtty parent is listed", gpus)
        state["mtty_path"] = mtty[4]
        node = await introspect(bus, mtty[4], GPU, "a GPU object")
        props = {p.name: p.signature for p in iface_of(node, GPU).properties}
        c.equal(props.get("Devices"), "ao", "the GPU introspection has Devices (ao)")
        await introspect(bus, "/org/vgpud1/gpu", "org.freedesktop.DBus.Introspectable",
                         "the GPU objects' parent")
        cap = await state["mgr"].call_get_capacity("RTX6000-4Q", {"numa_node": Variant("i", 1)})
        c.equal(cap, 6, "GetCapacity with numa_node sent as i (a signed int): one GPU of six 4Q")

    async def create_and_watch():
        mgr = state["mgr"]
        created = asyncio.get_running_loop().create_future()

        def on_created(uuid, path):
            if not created.done():
                created.set_result((uuid, path))

        mgr.on_device_created(on_created)
        uuid, path = await mgr.call_create_device("mtty-1", {"owner": Variant("s", "next-vm")})
        c.check(path.startswith("/org/vgpud1/device/"), "CreateDevice returns uuid and path",
                path)
        c.equal(await asyncio.wait_for(created, SIGNAL_TIMEOUT_S), (uuid, path),
                "DeviceCreated arrives with uuid and path")
        state["uuid"], state["path"] = uuid, path
        node = await introspect(bus, path, DEVICE, "a device object")
        obj = bus.get_proxy_object(NAME, path, node)
        dev = obj.get_interface(DEVICE)
        c.equal(await dev.get_uuid(), uuid, "the device proxy reads Uuid")
        c.equal(await dev.get_owner(), "next-vm", "the device proxy reads Owner")
        c.equal(await dev.get_autostart(), True, "the device proxy reads Autostart")
        rows = [d for d in await mgr.call_list_devices() if d[0] == uuid]
        c.equal(len(rows), 1, "ListDevices lists it once")
        if rows:
            c.equal((rows[0][3], rows[0][4]), ("next-vm", path), "ListDevices: owner and path")

        # One PropertiesChanged for one change, with only what changed.
        seen = []
        arrived = asyncio.Event()

        def on_changed(iface, changed, invalidated):
            seen.append((iface, unwrap(changed), list(invalidated)))
            arrived.set()

        props = obj.get_interface("org.freedesktop.DBus.Properties")
        props.on_properties_changed(on_changed)
        await mgr.call_modify_device(uuid, {"autostart": Variant("b", False)})
        await asyncio.wait_for(arrived.wait(), SIGNAL_TIMEOUT_S)
        await asyncio.sleep(QUIET_S)  # only to see that no further signal comes
        c.equal(len(seen), 1, "ModifyDevice autostart false: one PropertiesChanged", seen)
        if seen:
            c.equal(seen[0], (DEVICE, {"Autostart": False}, []),
                    "the signal carries only Autostart, now false")
        c.equal(await dev.get_autostart(), False, "the proxy reads Autostart false")

    async def type_info():
        info = unwrap(await state["mgr"].call_get_type_info("mtty-1", {}))
        print(f"    GetTypeInfo(mtty-1) = {info}")
        c.equal(info.get("device_api"), "vfio-pci", "GetTypeInfo of mtty-1: device_api")
        await expect_error("GetTypeInfo of an unknown type", "org.vgpud1.Error.NotFound",
                           state["mgr"].call_get_type_info("no-such-type", {}))

    async def remove():
        mgr, om = state["mgr"], state["om"]
        uuid, path = state["uuid"], state["path"]
        gone = asyncio.get_running_loop().create_future()

        def on_removed(p, ifaces):
            if p == path and not gone.done():
                gone.set_result(list(ifaces))

        om.on_interfaces_removed(on_removed)
        await mgr.call_remove_device(uuid, {})
        ifaces = await asyncio.wait_for(gone, SIGNAL_TIMEOUT_S)
        c.check(DEVICE in ifaces, "InterfacesRemoved arrives, naming org.vgpud1.Device", ifaces)
        c.check(all(d[0] != uuid for d in await mgr.call_list_devices()),
                "ListDevices no longer lists it")
        await expect_error("RemoveDevice of it again", "org.vgpud1.Error.NotFound",
                           mgr.call_remove_device(uuid, {}))
        await expect_error("CreateDevice of an unknown type", "org.vgpud1.Error.NotFound",
                           mgr.call_create_device("no-such-type", {}))

    for name, fn in [
        ("introspect the manager, get its proxy", manager),
        ("a GPU object", gpu),
        ("create, a device object, PropertiesChanged", create_and_watch),
        ("GetTypeInfo", type_info),
        ("remove", remove),
    ]:
        print(f"--- {name}", flush=True)
        try:
            await fn()
        except Exception as e:  # noqa: BLE001 - every failure is reported
            c.failed.append(name)
            print(f"FAIL: {name}: {type(e).__name__}: {e}", flush=True)
            if name.startswith("introspect the manager"):
                break
    bus.disconnect()


asyncio.run(main())
c.finish()
