#!/usr/bin/python3
"""A fake kubelet for tests/kubevirt_plugin.rs, written with grpcio from stubs that
grpc_tools.protoc generates from vgpud-kubevirt's vendored protos (a different gRPC stack
from the plugin's tonic).

It serves Registration on <dir>/kubelet.sock and records each registration; for each it
dials the plugin's socket, checks GetDevicePluginOptions and follows ListAndWatch. It admits
pods as kubelet's device manager does (GetPreferredAllocation when offered, then Allocate
with the chosen IDs) and serves PodResources v1 List from the pods it admitted. A restart
deletes every socket in the directory and makes kubelet.sock anew, as kubelet does.

Commands come as JSON lines on stdin; each gets one JSON line on stdout.

usage: fake_kubelet.py STUBS_DIR PLUGIN_DIR POD_RESOURCES_SOCKET
"""

import json
import os
import sys
import threading
import time
from concurrent import futures

sys.path.insert(0, sys.argv[1])
import grpc  # noqa: E402
from deviceplugin.v1beta1 import api_pb2 as dp  # noqa: E402
from deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc  # noqa: E402
from podresources.v1 import api_pb2 as pr  # noqa: E402
from podresources.v1 import api_pb2_grpc as pr_grpc  # noqa: E402

PLUGIN_DIR = sys.argv[2]
POD_RESOURCES = sys.argv[3]
LOCK = threading.Lock()
REGISTRATIONS = []  # dicts, in order
LISTS = {}  # resource -> {"devices": [...], "updates": n, "at": monotonic}
PLUGINS = {}  # resource -> (channel, stub, options)
PODS = {}  # pod name -> {resource: [ids]}


def device_json(d):
    return {
        "id": d.ID,
        "health": d.health,
        "numa": [n.ID for n in d.topology.nodes] if d.HasField("topology") else [],
    }


def watch(resource, stub, generation):
    try:
        for resp in stub.ListAndWatch(dp.Empty()):
            with LOCK:
                if PLUGINS.get(resource, (None, None, None, -1))[3] != generation:
                    return
                entry = LISTS.setdefault(resource, {"updates": 0})
                entry["devices"] = [device_json(d) for d in resp.devices]
                entry["updates"] += 1
                entry["at"] = time.monotonic()
    except grpc.RpcError:
        pass


class Registration(dp_grpc.RegistrationServicer):
    def Register(self, request, context):
        endpoint = os.path.join(PLUGIN_DIR, request.endpoint)
        # kubelet dials the endpoint and asks for the options before it answers.
        channel = grpc.insecure_channel("unix://" + endpoint)
        stub = dp_grpc.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(dp.Empty(), timeout=5)
        with LOCK:
            generation = len(REGISTRATIONS)
            REGISTRATIONS.append(
                {
                    "version": request.version,
                    "endpoint": request.endpoint,
                    "resource": request.resource_name,
                    "preferred": request.options.get_preferred_allocation_available,
                    "prestart": request.options.pre_start_required,
                    "options_preferred": options.get_preferred_allocation_available,
                    "at": time.monotonic(),
                }
            )
            PLUGINS[request.resource_name] = (channel, stub, options, generation)
        threading.Thread(
            target=watch, args=(request.resource_name, stub, generation), daemon=True
        ).start()
        return dp.Empty()


class PodResources(pr_grpc.PodResourcesListerServicer):
    def List(self, request, context):
        with LOCK:
            pods = [
                pr.PodResources(
                    name=name,
                    namespace="default",
                    containers=[
                        pr.ContainerResources(
                            name="compute",
                            devices=[
                                pr.ContainerDevices(resource_name=r, device_ids=ids)
                                for r, ids in held.items()
                            ],
                        )
                    ],
                )
                for name, held in PODS.items()
            ]
        return pr.ListPodResourcesResponse(pod_resources=pods)


SERVERS = {}


def start_kubelet():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    dp_grpc.add_RegistrationServicer_to_server(Registration(), server)
    server.add_insecure_port("unix://" + os.path.join(PLUGIN_DIR, "kubelet.sock"))
    server.start()
    SERVERS["kubelet"] = server


def start_pod_resources():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pr_grpc.add_PodResourcesListerServicer_to_server(PodResources(), server)
    server.add_insecure_port("unix://" + POD_RESOURCES)
    server.start()
    SERVERS["pods"] = server


def status_json(e):
    return {"ok": False, "code": e.code().name, "details": e.details()}


def allocate(resource, ids):
    with LOCK:
        stub = PLUGINS[resource][1]
    req = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)])
    try:
        resp = stub.Allocate(req, timeout=60)
    except grpc.RpcError as e:
        return status_json(e)
    c = resp.container_responses[0]
    return {
        "ok": True,
        "envs": dict(c.envs),
        "devices": [
            {"container": d.container_path, "host": d.host_path, "perm": d.permissions}
            for d in c.devices
        ],
        "mounts": len(c.mounts),
    }


def admit(pod, resource, count):
    """As the device manager admits a pod: healthy IDs not yet given out, the plugin's
    preference among them, then Allocate; the pod holds them once Allocate answers."""
    with LOCK:
        stub = PLUGINS[resource][1]
        taken = {i for held in PODS.values() for i in held.get(resource, [])}
        available = [
            d["id"]
            for d in LISTS.get(resource, {}).get("devices", [])
            if d["health"] == "Healthy" and d["id"] not in taken
        ]
    if len(available) < count:
        return {"ok": False, "code": "UnexpectedAdmissionError", "details": "too few devices"}
    req = dp.PreferredAllocationRequest(
        container_requests=[
            dp.ContainerPreferredAllocationRequest(
                available_deviceIDs=available, allocation_size=count
            )
        ]
    )
    chosen = list(stub.GetPreferredAllocation(req, timeout=10).container_responses[0].deviceIDs)
    out = allocate(resource, chosen)
    out["chosen"] = chosen
    if out["ok"]:
        with LOCK:
            PODS.setdefault(pod, {}).setdefault(resource, []).extend(chosen)
    return out


def storm(resource, ids):
    with futures.ThreadPoolExecutor(max_workers=len(ids)) as pool:
        results = list(pool.map(lambda i: allocate(resource, [i]), ids))
    return {"ok": True, "results": results}


def bench(resource, ids):
    """Allocates each ID alone, one after another; each call's latency in ms."""
    with LOCK:
        stub = PLUGINS[resource][1]
    out = []
    for i in ids:
        req = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=[i])])
        t0 = time.monotonic()
        stub.Allocate(req, timeout=60)
        out.append((time.monotonic() - t0) * 1000)
    return {"ok": True, "ms": out}


def restart():
    """kubelet's restart: its servers go, every socket in the directory is deleted (the
    device manager empties the directory on start), kubelet.sock is made anew."""
    SERVERS.pop("kubelet").stop(0).wait()
    with LOCK:
        for _, (channel, _, _, _) in PLUGINS.items():
            channel.close()
        PLUGINS.clear()
        LISTS.clear()
    for name in os.listdir(PLUGIN_DIR):
        path = os.path.join(PLUGIN_DIR, name)
        if os.path.exists(path) and not os.path.isdir(path):
            os.unlink(path)
    time.sleep(0.2)
    start_kubelet()
    return {"ok": True}


def main():
    start_kubelet()
    start_pod_resources()
    print(json.dumps({"ok": True, "ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        c = cmd["cmd"]
        try:
            if c == "registrations":
                with LOCK:
                    out = {"ok": True, "registrations": list(REGISTRATIONS)}
            elif c == "lists":
                with LOCK:
                    out = {"ok": True, "lists": json.loads(json.dumps(LISTS)), "now": time.monotonic()}
            elif c == "allocate":
                out = allocate(cmd["resource"], cmd["ids"])
            elif c == "admit":
                out = admit(cmd["pod"], cmd["resource"], cmd["count"])
            elif c == "delete_pod":
                with LOCK:
                    PODS.pop(cmd["pod"], None)
                out = {"ok": True}
            elif c == "storm":
                out = storm(cmd["resource"], cmd["ids"])
            elif c == "pods_down":
                SERVERS.pop("pods").stop(0).wait()
                if os.path.exists(POD_RESOURCES):
                    os.unlink(POD_RESOURCES)
                out = {"ok": True}
            elif c == "pods_up":
                start_pod_resources()
                out = {"ok": True}
            elif c == "bench":
                out = bench(cmd["resource"], cmd["ids"])
            elif c == "restart":
                out = restart()
            else:
                out = {"ok": False, "code": "BadCommand", "details": c}
        except Exception as e:  # noqa: BLE001 -- reported to the test, which fails
            out = {"ok": False, "code": "Exception", "details": repr(e)}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
