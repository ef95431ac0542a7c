/* vgpud's page in Cockpit: the host's GPUs, devices, types and layouts from org.vgpud1 on the
 * system bus (docs/api.md). Everything follows the bus: the object manager's objects through
 * proxies (InterfacesAdded/Removed, PropertiesChanged) and the manager's signals. Nothing is
 * polled and there is no reload button. */
"use strict";

(function () {
    const BUS_NAME = "org.vgpud1";
    const ROOT = "/org/vgpud1";
    const MANAGER = "org.vgpud1.Manager";
    const NVIDIA_PATH = "/org/vgpud1/nvidia";
    const NVIDIA = "org.vgpud1.Nvidia";
    const LAYOUTS_PATH = "/org/vgpud1/layouts";
    const LAYOUTS = "org.vgpud1.Layouts";

    let client = null;
    let gpus = null; // proxies of org.vgpud1.Gpu
    let devices = null; // proxies of org.vgpud1.Device
    let types = []; // ListTypes rows: [gpu, id, name, framebuffer, max, available]
    const typeInfo = {}; // type id -> GetTypeInfo's answer, unwrapped
    const metrics = {}; // GPU address -> GetMetrics's answer, unwrapped, or null
    let denied = false;
    let running = true; // false while org.vgpud1 has no owner: nothing stale is shown then

    const $ = (id) => document.getElementById(id);

    /* a{sv} values arrive as {t, v} variants. */
    function unwrap(v) {
        return v && typeof v === "object" && "t" in v && "v" in v ? v.v : v;
    }
    function unwrapAll(dict) {
        const out = {};
        for (const k in dict || {}) out[k] = unwrap(dict[k]);
        return out;
    }
    function variant(sig, value) {
        return cockpit.variant(sig, value);
    }

    function el(tag, attrs, ...children) {
        const e = document.createElement(tag);
        for (const k in attrs || {}) {
            if (k === "class") e.className = attrs[k];
            else if (k === "text") e.textContent = attrs[k];
            else if (k.startsWith("on")) e.addEventListener(k.substring(2), attrs[k]);
            else if (attrs[k] !== undefined && attrs[k] !== null && attrs[k] !== false) e.setAttribute(k, attrs[k] === true ? "" : attrs[k]);
        }
        for (const c of children.flat()) {
            if (c === null || c === undefined) continue;
            e.append(c instanceof Node ? c : document.createTextNode(String(c)));
        }
        return e;
    }

    function bytes(n) {
        if (n === undefined || n === null) return "—";
        const units = ["B", "KiB", "MiB", "GiB", "TiB"];
        let i = 0;
        while (n >= 1024 && i < units.length - 1) { n /= 1024; i++ }
        return (Number.isInteger(n) ? n : n.toFixed(1)) + " " + units[i];
    }

    function bar(fraction, text, id) {
        const b = el("div", { class: "bar" + (fraction >= 1 ? " full" : ""), role: "progressbar", id },
                     el("div", { class: "fill" }), el("span", { class: "text", text }));
        b.firstChild.style.width = Math.max(0, Math.min(1, fraction)) * 100 + "%";
        b.setAttribute("aria-valuenow", String(Math.round(fraction * 100)));
        return b;
    }

    function label(text, kind) {
        return el("span", { class: "label" + (kind ? " " + kind : ""), text });
    }

    /* Errors: the D-Bus name and message; AccessDenied says what the user lacks. */
    function errorName(err) {
        if (!err) return "Error";
        if (err.name && err.name !== "Error") return err.name;
        if (err.problem) return "cockpit: " + err.problem;
        return "Error";
    }
    function errorMessage(err) {
        return (err && (err.message || err.problem)) || String(err);
    }
    function accessHint(name, message) {
        if (name !== "org.freedesktop.DBus.Error.AccessDenied" &&
            name !== "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired" &&
            name !== "cockpit: access-denied")
            return null;
        // vgpud's refusals name the polkit action (docs/api.md, Who may do what).
        if ((message || "").includes("org.vgpud1.configure-host")) {
            return "Configuring the host (VFs, MIG, the scheduler, layouts) is for administrators only: the group vgpud does not allow it. Turn on administrative access (Cockpit's superuser mode, with an administrator's password).";
        }
        return "You may not use vgpud as this user: to read and manage devices, an administrator adds you to the group vgpud (usermod -aG vgpud USER, then log in again); or turn on administrative access (Cockpit's superuser mode, with an administrator's password).";
    }
    function errorBlock(err) {
        const name = errorName(err);
        const hint = accessHint(name, errorMessage(err));
        return [el("div", { class: "name", text: name }),
            el("div", { class: "message", text: errorMessage(err) }),
            hint ? el("div", { class: "hint", text: hint }) : null].filter(Boolean);
    }
    const shown = {};
    function showError(what, err) {
        const name = errorName(err);
        const key = what + "\n" + name + "\n" + errorMessage(err);
        if (shown[key]) return;
        const alert = el("div", { class: "alert", role: "alert", "data-error-name": name },
                         el("div", {},
                            el("div", { class: "title", text: what }),
                            errorBlock(err)),
                         el("button", {
                             class: "btn btn-link close",
                             type: "button",
                             "aria-label": "Dismiss",
                             text: "×",
                             onclick: () => { alert.remove(); delete shown[key] }
                         }));
        shown[key] = alert;
        $("alerts").append(alert);
    }
    function isDenied(err) {
        return accessHint(errorName(err), errorMessage(err)) !== null;
    }

    function call(path, iface, method, args, signature) {
        return client.call(path, iface, method, args, { type: signature });
    }

    /* ---- GPUs ---- */

    function gpuList() {
        if (!gpus || denied || !running) return [];
        return Object.keys(gpus).filter(p => gpus[p] && gpus[p].valid !== false && gpus[p].Address)
                .map(p => gpus[p])
                .sort((a, b) => a.Address.localeCompare(b.Address));
    }

    function renderGpus() {
        const body = $("gpus").tBodies[0];
        const rows = gpuList().map(g => {
            const [migNow, migPending] = g.MigMode || [false, false];
            const sched = unwrapAll(g.Scheduler);
            const instances = g.GpuInstances || [];
            const m = metrics[g.Address];
            let mig = "—";
            if (migNow || migPending) {
                mig = el("span", {},
                         label(migNow ? "on" : "off", migNow ? "on" : "off"),
                         migPending !== migNow ? label("pending " + (migPending ? "on" : "off"), "warn") : null,
                         migNow ? " " + instances.length + " GPU instance" + (instances.length === 1 ? "" : "s") : null,
                         migNow ? migBar(g.Address, instances) : null,
                         migNow ? migList(g.Address, instances) : null,
                         migNow ? action("Create GPU instance", "btn-link act-mig-create", () => openMigCreate(g.Address)) : null);
            }
            let util = "—";
            let fb = "—";
            if (m && m.gpu_utilization !== undefined) util = bar(m.gpu_utilization / 100, m.gpu_utilization + " %");
            if (m && m.memory_total) fb = bar(m.memory_used / m.memory_total, bytes(m.memory_used) + " of " + bytes(m.memory_total));
            let scheduler = "—";
            if (sched.policy) {
                scheduler = sched.policy + (sched.arr ? " (ARR)" : "") +
                    (sched.timeslice_ms ? ", " + sched.timeslice_ms + " ms" : "");
            }
            return el("tr", { "data-gpu": g.Address },
                      el("td", { class: "mono", text: g.Address }),
                      el("td", { text: g.Model }),
                      el("td", { text: g.Driver || "—" }),
                      el("td", {}, (g.SharingModes || []).map(s => label(s))),
                      el("td", { text: g.TotalVfs ? g.NumVfs + " of " + g.TotalVfs : "—" }),
                      el("td", {}, mig),
                      el("td", { text: g.NumaNode >= 0 ? String(g.NumaNode) : "—" }),
                      el("td", {}, scheduler, sched.policy
                          ? action("Change", "btn-link act-scheduler", () => openScheduler(g.Address, sched))
                          : null),
                      el("td", {}, util),
                      el("td", {}, fb));
        });
        body.replaceChildren(...rows);
        $("gpus-empty").hidden = rows.length > 0 || denied || !running;
    }

    /* The MIG bar: the GPU's slices, each GPU instance where its placement puts it. */
    const migSlices = {}; // GPU address -> its number of slices (from ListMigProfiles), or null while asked
    function migBar(address, instances) {
        if (!(address in migSlices)) {
            migSlices[address] = null;
            call(NVIDIA_PATH, NVIDIA, "ListMigProfiles", [address], "s")
                    .then(([profiles]) => {
                        let slices = 0;
                        for (const p of profiles) for (const [start, size] of p[7]) slices = Math.max(slices, start + size);
                        migSlices[address] = slices || null;
                        scheduleRender();
                    })
                    .catch(err => showError("ListMigProfiles " + address + " failed", err));
        }
        const slices = migSlices[address];
        if (!slices) return null;
        const b = el("div", { class: "migbar", title: slices + " slices" });
        for (const [id, , profile, start, size, device] of instances) {
            const seg = el("span", {
                class: "mig-instance" + (device && device !== "/" ? " used" : ""),
                "data-instance": String(id),
                title: "GPU instance " + id + " (" + profile + ") at slice " + start + (device && device !== "/" ? ", used by " + device : ""),
                text: profile
            });
            seg.style.left = (start / slices) * 100 + "%";
            seg.style.width = (size / slices) * 100 + "%";
            b.append(seg);
        }
        return b;
    }

    /* Under the bar, each GPU instance with its Destroy (configure-host: root or an administrator). */
    function migList(address, instances) {
        if (instances.length === 0) return null;
        return el("ul", { class: "mig-list" }, instances.map(([id, , profile, start, , device]) =>
            el("li", { "data-instance": String(id) },
               el("span", { text: profile + " #" + id + " at slice " + start +
                   (device && device !== "/" ? ", used by " + device : "") }),
               action("Destroy", "btn-link act-mig-destroy", () => askMigDestroy(address, id, profile)))));
    }

    /* The create dialog offers the profiles ListMigProfiles says have room now, at their free
     * placements (or vgpud's choice of one). */
    let migProfiles = []; // ListMigProfiles rows with room: [id, index, name, slices, memory, max, remaining, placements, free]

    function openMigCreate(address) {
        const dialog = $("mig-dialog");
        const select = $("mig-profile");
        $("mig-gpu").textContent = address;
        $("mig-error").hidden = true;
        $("mig-submit").disabled = true;
        select.replaceChildren(el("option", { value: "", text: "Asking vgpud what fits…" }));
        $("mig-placement").replaceChildren();
        dialog.dataset.gpu = address;
        dialog.returnValue = "";
        dialog.showModal();
        call(NVIDIA_PATH, NVIDIA, "ListMigProfiles", [address], "s")
                .then(([profiles]) => {
                    migProfiles = profiles.filter(p => p[6] > 0 && p[8].length > 0);
                    if (migProfiles.length === 0) {
                        select.replaceChildren(el("option", { value: "", text: "No profile fits on this GPU now" }));
                        return;
                    }
                    select.replaceChildren(...migProfiles.map(p =>
                        el("option", { value: p[2], text: p[2] + " (" + p[3] + " slice" + (p[3] === 1 ? "" : "s") + ", " +
                            bytes(p[4]) + ") — " + p[6] + " more fit" })));
                    fillPlacements();
                    $("mig-submit").disabled = false;
                })
                .catch(err => {
                    select.replaceChildren(el("option", { value: "", text: "—" }));
                    migError(err);
                });
    }

    function fillPlacements() {
        const p = migProfiles.find(p => p[2] === $("mig-profile").value);
        const options = [el("option", { value: "", text: "Any free placement (vgpud chooses)" })];
        for (const [start, size] of (p ? p[8] : [])) {
            options.push(el("option", { value: String(start), text: size === 1 ? "slice " + start : "slices " + start + "–" + (start + size - 1) }));
        }
        $("mig-placement").replaceChildren(...options);
    }

    function migError(err) {
        const box = $("mig-error");
        box.replaceChildren(...errorBlock(err));
        box.hidden = false;
    }

    function submitMigCreate(event) {
        if (event.submitter && event.submitter.value !== "create") return; // Cancel closes it.
        event.preventDefault();
        const dialog = $("mig-dialog");
        const profile = $("mig-profile").value;
        if (!profile) return;
        const options = {};
        const placement = $("mig-placement").value;
        if (placement !== "") options.placement = variant("u", parseInt(placement, 10));
        $("mig-submit").disabled = true;
        call(NVIDIA_PATH, NVIDIA, "CreateGpuInstance", [dialog.dataset.gpu, profile, options], "ssa{sv}")
                .then(() => dialog.close("created"))
                .catch(err => { migError(err); $("mig-submit").disabled = false });
    }

    function askMigDestroy(address, id, profile) {
        const dialog = $("mig-destroy-dialog");
        $("mig-destroy-what").textContent = profile + " #" + id;
        $("mig-destroy-gpu").textContent = address;
        dialog.returnValue = "";
        dialog.onclose = () => {
            if (dialog.returnValue !== "destroy") return;
            call(NVIDIA_PATH, NVIDIA, "DestroyGpuInstance", [address, id, {}], "sua{sv}")
                    .catch(err => showError("DestroyGpuInstance " + address + " " + id + " failed", err));
        };
        dialog.showModal();
    }

    function refreshMetrics(address) {
        if (denied) return;
        call(NVIDIA_PATH, NVIDIA, "GetMetrics", [address], "s")
                .then(([m]) => { metrics[address] = unwrapAll(m); scheduleRender() })
                .catch(err => {
                    // NotSupported: no NVML on this host (or not an NVIDIA GPU); the bars stay out.
                    metrics[address] = null;
                    if (isDenied(err)) showError("Cannot read metrics", err);
                });
    }

    /* ---- The scheduler (configure-host: root or an administrator) ---- */

    function openScheduler(address, sched) {
        const dialog = $("scheduler-dialog");
        $("scheduler-gpu").textContent = address;
        $("scheduler-policy").value = sched.policy;
        $("scheduler-timeslice").value = sched.timeslice_ms || "";
        $("scheduler-error").hidden = true;
        $("scheduler-submit").disabled = false;
        dialog.dataset.gpu = address;
        dialog.showModal();
    }

    function submitScheduler(event) {
        if (event.submitter && event.submitter.value !== "set") return;
        event.preventDefault();
        const dialog = $("scheduler-dialog");
        const options = { policy: variant("s", $("scheduler-policy").value) };
        const slice = $("scheduler-timeslice").value.trim();
        if (slice) options.timeslice_ms = variant("u", parseInt(slice, 10));
        $("scheduler-submit").disabled = true;
        call(NVIDIA_PATH, NVIDIA, "SetScheduler", [dialog.dataset.gpu, options], "sa{sv}")
                .then(() => dialog.close("set"))
                .catch(err => {
                    const box = $("scheduler-error");
                    box.replaceChildren(...errorBlock(err));
                    box.hidden = false;
                    $("scheduler-submit").disabled = false;
                });
    }

    /* ---- Devices ---- */

    function deviceList() {
        if (!devices || denied || !running) return [];
        return Object.keys(devices).filter(p => devices[p] && devices[p].Uuid)
                .map(p => devices[p])
                .sort((a, b) => (a.Parent || "").localeCompare(b.Parent || "") ||
                      (a.Created || 0) - (b.Created || 0) || a.Uuid.localeCompare(b.Uuid));
    }

    function deviceMatches(d, filter) {
        if (!filter) return true;
        const hay = [d.Uuid, d.Owner, d.TypeId, d.TypeName, d.Parent, d.Kind, d.Active ? "active" : "inactive"]
                .join(" ").toLowerCase();
        return filter.toLowerCase().split(/\s+/).filter(Boolean).every(w => hay.includes(w));
    }

    function action(text, cls, onclick) {
        return el("button", { class: "btn " + cls, type: "button", text, onclick });
    }

    function renderDevices() {
        const body = $("devices").tBodies[0];
        const filter = $("device-filter").value.trim();
        const all = deviceList();
        const rows = all.filter(d => deviceMatches(d, filter)).map(d =>
            el("tr", { "data-uuid": d.Uuid },
               el("td", { class: "mono", text: d.Uuid }),
               el("td", { text: d.Owner || "—" }),
               el("td", {}, label(d.Active ? "active" : "inactive", d.Active ? "on" : "off")),
               el("td", { text: d.Kind }),
               el("td", { title: d.TypeId, text: d.TypeName || d.TypeId }),
               el("td", { class: "mono", text: d.Parent }),
               el("td", { text: d.Persistent ? "yes" : "no" }),
               el("td", { text: d.Autostart ? "yes" : "no" }),
               el("td", { class: "actions" },
                  !d.Active && d.Persistent ? action("Start", "btn-secondary act-start", () => deviceCall("StartDevice", d.Uuid)) : null,
                  d.Active ? action("Stop", "btn-secondary act-stop", () => deviceCall("StopDevice", d.Uuid)) : null,
                  action("XML", "btn-secondary act-xml", () => showXml(d.Uuid)),
                  action("Remove", "btn-link act-remove", () => askRemove(d.Uuid)))));
        body.replaceChildren(...rows);
        $("devices-empty").hidden = all.length > 0 || denied || !running;
    }

    function deviceCall(method, uuid) {
        return call(ROOT, MANAGER, method, [uuid, {}], "sa{sv}")
                .catch(err => showError(method + " " + uuid + " failed", err));
    }

    function askRemove(uuid) {
        const dialog = $("remove-dialog");
        $("remove-uuid").textContent = uuid;
        dialog.returnValue = "";
        dialog.onclose = () => {
            if (dialog.returnValue === "remove") deviceCall("RemoveDevice", uuid);
        };
        dialog.showModal();
    }

    function showXml(uuid) {
        const dialog = $("xml-dialog");
        $("xml-text").value = "";
        $("xml-copied").textContent = "";
        call(ROOT, MANAGER, "GetHostdevXml", [uuid], "s")
                .then(([xml]) => {
                    $("xml-text").value = xml;
                    dialog.showModal();
                })
                .catch(err => showError("GetHostdevXml " + uuid + " failed", err));
    }

    function copyXml() {
        const text = $("xml-text");
        const done = () => { $("xml-copied").textContent = "Copied" };
        // The clipboard API needs a secure context; Cockpit over plain http falls back to a selection copy.
        if (navigator.clipboard && window.isSecureContext) {
            navigator.clipboard.writeText(text.value).then(done, () => { text.select(); document.execCommand("copy"); done() });
        } else {
            text.select();
            document.execCommand("copy");
            done();
        }
    }

    /* ---- The create dialog: only what GetCapacity says fits ---- */

    let capacityTypes = []; // [{id, name, count, gpus: [{address, count}]}]

    function openCreate() {
        const dialog = $("create-dialog");
        const typeSelect = $("create-type");
        $("create-error").hidden = true;
        $("create-owner").value = "";
        $("create-persistent").checked = true;
        typeSelect.replaceChildren(el("option", { value: "", text: "Asking vgpud what fits…" }));
        $("create-gpu").replaceChildren();
        $("create-submit").disabled = true;
        dialog.returnValue = "";
        dialog.showModal();

        const ids = {};
        for (const [gpu, id, name] of types) {
            ids[id] = ids[id] || { id, name, gpus: [] };
            ids[id].gpus.push(gpu);
        }
        const asks = Object.values(ids).map(t =>
            call(ROOT, MANAGER, "GetCapacity", [t.id, {}], "sa{sv}").then(([count]) => {
                t.count = count;
                if (!count) return t;
                return Promise.all(t.gpus.map(gpu =>
                    call(ROOT, MANAGER, "GetCapacity", [t.id, { parent: variant("s", gpu) }], "sa{sv}")
                            .then(([n]) => ({ address: gpu, count: n }))))
                        .then(per => { t.gpus = per.filter(g => g.count > 0); return t });
            }));
        Promise.all(asks).then(all => {
            capacityTypes = all.filter(t => t.count > 0).sort((a, b) => a.name.localeCompare(b.name));
            if (capacityTypes.length === 0) {
                typeSelect.replaceChildren(el("option", { value: "", text: "No type fits on this host now" }));
                return;
            }
            typeSelect.replaceChildren(...capacityTypes.map(t =>
                el("option", { value: t.id, text: t.name + " (" + t.id + ") — " + t.count + " more fit" })));
            fillGpus();
            $("create-submit").disabled = false;
        }).catch(err => {
            typeSelect.replaceChildren(el("option", { value: "", text: "—" }));
            dialogError(err);
        });
    }

    function fillGpus() {
        const t = capacityTypes.find(t => t.id === $("create-type").value);
        const options = [el("option", { value: "", text: "Any GPU (vgpud chooses)" })];
        for (const g of (t ? t.gpus : [])) options.push(el("option", { value: g.address, text: g.address + " — " + g.count + " more fit" }));
        $("create-gpu").replaceChildren(...options);
    }

    function dialogError(err) {
        const box = $("create-error");
        box.replaceChildren(...errorBlock(err));
        box.hidden = false;
    }

    function submitCreate(event) {
        const dialog = $("create-dialog");
        if (event.submitter && event.submitter.value !== "create") return; // Cancel closes it.
        event.preventDefault();
        const type = $("create-type").value;
        if (!type) return;
        const options = { persistent: variant("b", $("create-persistent").checked) };
        const owner = $("create-owner").value.trim();
        if (owner) options.owner = variant("s", owner);
        const gpu = $("create-gpu").value;
        if (gpu) options.parent = variant("s", gpu);
        $("create-submit").disabled = true;
        call(ROOT, MANAGER, "CreateDevice", [type, options], "sa{sv}")
                .then(() => dialog.close("created"))
                .catch(err => { dialogError(err); $("create-submit").disabled = false });
    }

    /* ---- Types per GPU ---- */

    let typesPending = false;
    let typesAgain = false;
    function refreshTypes() {
        if (denied) return;
        if (typesPending) { typesAgain = true; return }
        typesPending = true;
        call(ROOT, MANAGER, "ListTypes", [], "")
                .then(([rows]) => {
                    types = rows;
                    for (const [, id] of rows) {
                        if (id in typeInfo) continue;
                        typeInfo[id] = null;
                        call(ROOT, MANAGER, "GetTypeInfo", [id, {}], "sa{sv}")
                                .then(([info]) => { typeInfo[id] = unwrapAll(info); scheduleRender() })
                                .catch(() => { delete typeInfo[id] });
                    }
                    scheduleRender();
                })
                .catch(err => fail("Cannot list the types", err))
                .then(() => {
                    typesPending = false;
                    if (typesAgain) { typesAgain = false; refreshTypes() }
                });
    }

    function renderTypes() {
        const byGpu = {};
        for (const row of denied || !running ? [] : types) (byGpu[row[0]] = byGpu[row[0]] || []).push(row);
        const blocks = Object.keys(byGpu).sort().map(gpu =>
            el("div", { class: "gpu-types", "data-gpu": gpu },
               el("h3", { class: "mono", text: gpu }),
               el("table", { class: "table" },
                  el("thead", {}, el("tr", {},
                                     el("th", { text: "Type" }), el("th", { text: "Id" }), el("th", { text: "Class" }),
                                     el("th", { text: "Framebuffer" }), el("th", { text: "Available" }))),
                  el("tbody", {}, byGpu[gpu].map(([, id, name, fb, max, available]) => {
                      const info = typeInfo[id] || {};
                      const cls = [info.class, info.series ? "series " + info.series : null].filter(Boolean).join(", ");
                      return el("tr", { "data-type": id },
                                el("td", { text: name }),
                                el("td", { class: "mono", text: id }),
                                el("td", { text: cls || "—" }),
                                el("td", { text: fb || info.framebuffer ? bytes(fb || info.framebuffer) : "—" }),
                                el("td", {}, max ? bar(1 - available / max, available + " of " + max + " available")
                                    : String(available) + " available"));
                  })))));
        $("types").replaceChildren(...blocks);
    }

    /* ---- Layouts ---- */

    function refreshLayouts() {
        if (denied) return;
        call(LAYOUTS_PATH, LAYOUTS, "ListLayouts", [], "")
                .then(([rows]) => {
                    const body = $("layouts").tBodies[0];
                    body.replaceChildren(...rows.map(([name, description]) =>
                        el("tr", { "data-layout": name },
                           el("td", { text: name }),
                           el("td", { text: description || "—" }),
                           el("td", { class: "actions" },
                              action("Diff", "btn-secondary act-diff", () => layoutDiff(name)),
                              action("Dry run", "btn-secondary act-dry-run", () => layoutApply(name, true)),
                              action("Apply", "btn-secondary act-apply", () => layoutApply(name, false))))));
                    $("layouts-empty").hidden = rows.length > 0;
                })
                .catch(err => fail("Cannot list the layouts", err));
    }

    function resultTable(title, headers, rows) {
        return [el("h3", { text: title }),
            rows.length === 0
                ? el("p", { class: "muted", text: "Nothing differs." })
                : el("table", { class: "table", id: "layout-table" },
                     el("thead", {}, el("tr", {}, headers.map(h => el("th", { text: h })))),
                     el("tbody", {}, rows.map(r => el("tr", {}, r.map(c => el("td", { text: c }))))))];
    }

    function layoutDiff(name) {
        call(LAYOUTS_PATH, LAYOUTS, "DiffLayout", [name], "s")
                .then(([rows]) => $("layout-result").replaceChildren(
                    ...resultTable("Differences from layout " + name, ["GPU", "Item", "Wanted", "Actual"], rows)))
                .catch(err => showError("DiffLayout " + name + " failed", err));
    }

    function layoutApply(name, dryRun) {
        call(LAYOUTS_PATH, LAYOUTS, "ApplyLayout", [name, { dry_run: variant("b", dryRun) }], "sa{sv}")
                .then(([rows]) => $("layout-result").replaceChildren(
                    ...resultTable((dryRun ? "Plan (dry run) of layout " : "Applied layout ") + name,
                                   ["Status", "GPU", "Action", "Subject", "Detail"], rows)))
                .catch(err => showError((dryRun ? "Dry run of " : "Applying ") + name + " failed", err));
    }

    /* ---- Rendering, once per burst of events ---- */

    let renderPending = false;
    function scheduleRender() {
        if (renderPending) return;
        renderPending = true;
        window.setTimeout(() => {
            renderPending = false;
            renderGpus();
            renderDevices();
            renderTypes();
        }, 0);
    }

    function fail(what, err) {
        if (isDenied(err)) {
            denied = true;
            $("bus-state").textContent = "access denied";
            $("create-open").disabled = true;
            scheduleRender();
        }
        showError(what, err);
    }

    function init() {
        $("create-open").addEventListener("click", openCreate);
        $("create-type").addEventListener("change", fillGpus);
        $("create-form").addEventListener("submit", submitCreate);
        $("xml-copy").addEventListener("click", copyXml);
        $("scheduler-form").addEventListener("submit", submitScheduler);
        $("mig-form").addEventListener("submit", submitMigCreate);
        $("mig-profile").addEventListener("change", fillPlacements);
        $("device-filter").addEventListener("input", renderDevices);

        // "try": as root when the user turned on administrative access, else as the user.
        client = cockpit.dbus(BUS_NAME, { bus: "system", superuser: "try" });
        client.addEventListener("close", (ev, options) => {
            showError("The connection to the system bus closed", options);
        });
        // vgpud stopped (or restarting): say so and show nothing stale; back, read again what
        // the objects do not carry (types, layouts, metrics).
        client.addEventListener("owner", (ev, owner) => {
            const back = owner && !running;
            running = !!owner;
            if (!denied) $("bus-state").textContent = owner ? "" : "vgpud is not running";
            $("create-open").disabled = denied || !running;
            if (back && gpus) {
                refreshTypes();
                refreshLayouts();
                for (const g of gpuList()) refreshMetrics(g.Address);
            }
            scheduleRender();
        });

        // One call first: a refusal shows what the user lacks, and no data.
        call(ROOT, MANAGER, "ListGpus", [], "").then(() => {
            client.watch({ path_namespace: ROOT });
            gpus = client.proxies("org.vgpud1.Gpu", ROOT + "/gpu");
            devices = client.proxies("org.vgpud1.Device", ROOT + "/device");
            gpus.addEventListener("added", (ev, proxy) => { refreshMetrics(proxy.Address); scheduleRender() });
            gpus.addEventListener("changed", (ev, proxy) => { refreshMetrics(proxy.Address); scheduleRender() });
            gpus.addEventListener("removed", scheduleRender);
            // A device's coming, going, start or stop changes what fits: the types' room follows.
            for (const ev of ["added", "changed", "removed"]) devices.addEventListener(ev, () => { scheduleRender(); refreshTypes() });
            // So does a GPU instance another tool made, and a device's drift.
            client.subscribe({ interface: MANAGER, path: ROOT }, (path, iface, signal) => {
                if (/^Device(Created|Removed|Drift|Reclaimed)$/.test(signal) || signal === "GpuDrift") refreshTypes();
            });
            gpus.wait(() => {
                for (const g of gpuList()) refreshMetrics(g.Address);
                scheduleRender();
            });
            devices.wait(scheduleRender);
            refreshTypes();
            refreshLayouts();
        }).catch(err => fail("Cannot read vgpud's GPUs", err));
        scheduleRender();
    }

    document.addEventListener("DOMContentLoaded", init);
}());
