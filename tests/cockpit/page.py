#!/usr/bin/python3
"""vgpud's Cockpit page driven in headless Chromium as a person would (tests/cockpit_page.rs,
through tests/cockpit/run.sh). What the page shows is compared with what busctl reads from the
same private system bus. Prints `CHECK <name>: ok` per check passed; exits non-zero at the
first that fails. Screenshots go to --screenshots. Any error in the page's console fails."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

ap = argparse.ArgumentParser()
ap.add_argument("--root-url", required=True)
ap.add_argument("--broker-url", required=True)
ap.add_argument("--nobody-url", required=True)
ap.add_argument("--bus", required=True)
ap.add_argument("--vgpuctl", required=True)
ap.add_argument("--screenshots", required=True)
ap.add_argument("--layout", default="cockpit-test")
ap.add_argument("--vgpud", required=True)
ap.add_argument("--vgpud-pid", type=int, required=True)
ap.add_argument("--simroot", required=True)
ap.add_argument("--work", required=True)
args = ap.parse_args()
os.makedirs(args.screenshots, exist_ok=True)
PAGE = "/cockpit/@localhost/vgpud/index.html"


class CheckFailed(Exception):
    pass


def ok(name):
    print(f"CHECK {name}: ok", flush=True)


def busctl(*call):
    out = subprocess.run(
        ["busctl", f"--address={args.bus}", "--json=short", "call", "org.vgpud1", *call],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["data"]


def manager(method, sig="", *params):
    return busctl("/org/vgpud1", "org.vgpud1.Manager", method, *([sig, *params] if sig else []))


def devices_on_bus():
    return {row[0]: row for row in manager("ListDevices")[0]}


def escape(segment):
    """A path segment escaped as systemd does (docs/api.md)."""
    out = "".join(c if c.isalnum() and c.isascii() else "_%02x" % ord(c) for c in segment)
    return "_%02x" % ord(out[0]) + out[1:] if out[0].isdigit() else out


def prop(kind, name, interface, prop):
    out = subprocess.run(
        ["busctl", f"--address={args.bus}", "--json=short", "get-property", "org.vgpud1",
         f"/org/vgpud1/{kind}/{escape(name)}", interface, prop],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["data"]


def device_prop(uuid, name):
    return prop("device", uuid, "org.vgpud1.Device", name)


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1600,1100", "--no-first-run", "--disable-extensions",
              f"--user-data-dir={tempfile.mkdtemp(prefix='vgpud-chromium-')}"]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def wait(driver, what, cond, timeout=15):
    try:
        # The page re-renders its tables on every change: an element found a moment ago may be gone.
        return WebDriverWait(driver, timeout, poll_frequency=0.1,
                             ignored_exceptions=[StaleElementReferenceException]).until(lambda d: cond(d))
    except TimeoutException:
        shot(driver, "failed-" + what.replace(" ", "-"))
        raise CheckFailed(f"timed out waiting for {what}")


def shot(driver, name):
    path = os.path.join(args.screenshots, name + ".png")
    driver.save_screenshot(path)
    print(f"screenshot {path}", flush=True)


def console_errors(driver, where):
    logs = driver.get_log("browser")
    for entry in logs:
        print(f"console[{where}] {entry['level']}: {entry['message']}", flush=True)
    severe = [e for e in logs if e["level"] == "SEVERE"]
    if severe:
        raise CheckFailed(f"errors in the page's console ({where}): {severe}")


def rows(driver, table):
    return driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")


def row_of(driver, uuid):
    found = driver.find_elements(By.CSS_SELECTOR, f'#devices tr[data-uuid="{uuid}"]')
    return found[0] if found else None


def click(driver, row_css, cls):
    """Clicks the button of class CLS in the row ROW_CSS. The page re-renders its tables on any
    change (a metrics answer, a signal), so the row is found again until the click lands."""
    def once(d):
        d.find_element(By.CSS_SELECTOR, f"{row_css} .{cls}").click()
        return True
    wait(driver, f"a click on {cls}", once)


def dev(uuid):
    return f'#devices tr[data-uuid="{uuid}"]'


def types_available(driver):
    """(gpu, type id) -> the text of its capacity cell."""
    out = {}
    for block in driver.find_elements(By.CSS_SELECTOR, "#types .gpu-types"):
        for tr in block.find_elements(By.CSS_SELECTOR, "tbody tr"):
            out[(block.get_attribute("data-gpu"), tr.get_attribute("data-type"))] = \
                tr.find_elements(By.TAG_NAME, "td")[4].text
    return out


def bus_available():
    return {(r[0], r[1]): (f"{r[5]} of {r[4]} available" if r[4] else f"{r[5]} available")
            for r in manager("ListTypes")[0]}


def as_root():
    # The manifest: the menu entry and the condition, as the bridge serves them.
    with urllib.request.urlopen(args.root_url + "/cockpit/@localhost/manifests.json") as r:
        manifests = json.load(r)
    vgpud = manifests.get("vgpud")
    if not vgpud or vgpud["menu"]["index"]["label"] != "GPUs":
        raise CheckFailed(f"no menu entry GPUs for vgpud in manifests.json: {vgpud}")
    if {"path-exists": "/usr/share/dbus-1/system.d/org.vgpud1.conf"} not in vgpud.get("conditions", []):
        raise CheckFailed(f"no condition on vgpud's bus policy file: {vgpud}")
    ok("manifest")

    # One type full before the page opens (GVT-g's V5_4 has room for one): the dialog must not
    # offer it.
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=args.bus)
    subprocess.run([args.vgpuctl, "create", "i915-GVTg_V5_4", "--owner", "filler"], env=env,
                   check=True, capture_output=True)
    d = browser()
    try:
        d.get(args.root_url + PAGE)
        # 1. GPUs: every GPU of ListGpus, with its model and driver.
        gpus = manager("ListGpus")[0]

        def gpus_shown(d):
            shown = {r.get_attribute("data-gpu"): r.text for r in rows(d, "gpus")}
            return all(g[0] in shown and g[1] in shown[g[0]] and g[2] in shown[g[0]] for g in gpus) \
                and len(shown) == len(gpus)
        wait(d, "the GPUs", gpus_shown)
        ok(f"gpus ({len(gpus)} GPUs with model and driver)")
        # Utilization and framebuffer bars where GetMetrics answers (the fake NVML's GPUs).
        nvidia = [g[0] for g in gpus if g[2] == "nvidia"]
        for gpu in nvidia:
            m = busctl("/org/vgpud1/nvidia", "org.vgpud1.Nvidia", "GetMetrics", "s", gpu)[0]
            total = m["memory_total"]["data"] / 2**30
            total = str(int(total)) if total == int(total) else f"{total:.1f}"
            wait(d, f"the metrics of {gpu}", lambda d: any(
                r.get_attribute("data-gpu") == gpu
                and len(r.find_elements(By.CSS_SELECTOR, ".bar")) == 2
                and f"of {total} GiB" in r.text for r in rows(d, "gpus")))
        ok(f"metrics bars on the {len(nvidia)} NVIDIA GPUs")

        # 3. Types: each type of each GPU with its room, as ListTypes says.
        wait(d, "the types' room", lambda d: types_available(d) == bus_available())
        wait(d, "the types' class", lambda d: "Quadro" in d.find_element(By.ID, "types").text)
        ok("types (available of max per GPU, class from GetTypeInfo)")

        # 6. The scheduler of a GPU with no vGPU running, through its dialog.
        gpu = "0000:d8:00.0"
        click(d, f'#gpus tr[data-gpu="{gpu}"]', "act-scheduler")
        wait(d, "the scheduler dialog", lambda d: d.find_element(By.ID, "scheduler-dialog").is_displayed())
        Select(d.find_element(By.ID, "scheduler-policy")).select_by_value("equal-share")
        box = d.find_element(By.ID, "scheduler-timeslice")
        box.clear()
        box.send_keys("5")
        d.find_element(By.ID, "scheduler-submit").click()
        wait(d, "the scheduler dialog to close",
             lambda d: not d.find_element(By.ID, "scheduler-dialog").is_displayed())
        sched = prop("gpu", gpu, "org.vgpud1.Gpu", "Scheduler")
        if sched["policy"]["data"] != "equal-share" or sched["timeslice_ms"]["data"] != 5:
            raise CheckFailed(f"the bus's scheduler of {gpu} is {sched}")
        wait(d, "the new scheduler on the page", lambda d: any(
            r.get_attribute("data-gpu") == gpu and "equal-share, 5 ms" in r.text for r in rows(d, "gpus")))
        ok("scheduler set through its dialog, shown live")

        # 7. The MIG bar: MIG on and a 3g instance at slice 0 of an H200 (8 slices), by vgpuctl.
        h200 = "0000:49:00.0"
        env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=args.bus)
        for cmd in [["mig", "mode", h200, "on"], ["mig", "create", h200, "3g.71gb", "--placement", "0"]]:
            subprocess.run([args.vgpuctl, *cmd], env=env, check=True, capture_output=True)

        def mig_segment(d):
            row = next(r for r in rows(d, "gpus") if r.get_attribute("data-gpu") == h200)
            segs = row.find_elements(By.CSS_SELECTOR, ".migbar .mig-instance")
            return len(segs) == 1 and segs[0].text == "3g.71gb" and segs[0] \
                and segs[0].value_of_css_property("left") == "0px" \
                and abs(segs[0].size["width"] * 2 - row.find_element(By.CSS_SELECTOR, ".migbar").size["width"]) <= 2
        wait(d, "the MIG bar", mig_segment)
        ok("MIG bar: vgpuctl's GPU instance shown live at its placement")

        # The MIG view's create: its dialog offers the profiles ListMigProfiles says have room
        # (remaining and a free placement), at their free placements; the chosen one is made
        # by CreateGpuInstance, on the bus and in the bar without a reload.
        def instances_on_bus():
            return {i[0]: i for i in prop("gpu", h200, "org.vgpud1.Gpu", "GpuInstances")}

        def segment(d, gid):
            row = next(r for r in rows(d, "gpus") if r.get_attribute("data-gpu") == h200)
            found = row.find_elements(By.CSS_SELECTOR, f'.migbar .mig-instance[data-instance="{gid}"]')
            return found[0] if found else None

        d.execute_script("window.__vgpud_marker = 41")
        click(d, f'#gpus tr[data-gpu="{h200}"]', "act-mig-create")
        wait(d, "the MIG dialog's profiles", lambda d: d.find_element(By.ID, "mig-dialog").is_displayed()
             and d.find_element(By.ID, "mig-profile").find_elements(By.CSS_SELECTOR, "option[value]:not([value=''])"))
        profiles = busctl("/org/vgpud1/nvidia", "org.vgpud1.Nvidia", "ListMigProfiles", "s", h200)[0]
        fit = sorted(p[2] for p in profiles if p[6] > 0 and p[8])
        offered = sorted(o.get_attribute("value") for o in
                         d.find_element(By.ID, "mig-profile").find_elements(By.TAG_NAME, "option"))
        if offered != fit or len(fit) == len(profiles) or "3g.71gb" not in fit:
            raise CheckFailed(f"the MIG dialog offers {offered}, ListMigProfiles says {fit} of "
                              f"{[p[2] for p in profiles]} fit")
        ok(f"MIG create dialog offers what fits ({len(fit)} of {len(profiles)} profiles)")
        mig_profile = "1g.18gb" if "1g.18gb" in fit else fit[0]
        Select(d.find_element(By.ID, "mig-profile")).select_by_value(mig_profile)
        free = next(p[8] for p in profiles if p[2] == mig_profile)
        placements = [o.get_attribute("value") for o in
                      d.find_element(By.ID, "mig-placement").find_elements(By.TAG_NAME, "option")]
        if placements != [""] + [str(start) for start, _ in free]:
            raise CheckFailed(f"the MIG dialog offers placements {placements}, free are {free}")
        # Not the last free placement: vgpud's own choice here (the one keeping most room), so a
        # placement the page does not pass is seen.
        mig_start = free[0][0]
        if len(free) < 2:
            raise CheckFailed(f"{mig_profile} has free placements {free}: too few to tell a placement")
        Select(d.find_element(By.ID, "mig-placement")).select_by_value(str(mig_start))
        shot(d, "mig-create-dialog")
        before = instances_on_bus()
        d.find_element(By.ID, "mig-submit").click()
        wait(d, "the MIG dialog to close", lambda d: not d.find_element(By.ID, "mig-dialog").is_displayed())
        made = {i: r for i, r in instances_on_bus().items() if i not in before}
        if len(made) != 1 or list(made.values())[0][2] != mig_profile or list(made.values())[0][3] != mig_start:
            raise CheckFailed(f"after the MIG dialog's create the bus has new GPU instances {made}")
        gid = list(made)[0]
        seg = wait(d, "the new GPU instance in the bar", lambda d: segment(d, gid))
        if seg.text != mig_profile or d.execute_script("return window.__vgpud_marker") != 41:
            raise CheckFailed(f"the bar shows {seg.text!r} for GPU instance {gid} (or the page reloaded)")
        ok(f"MIG create through the dialog: {mig_profile} #{gid} at {mig_start} on the bus and in the bar, live")

        # Destroy, confirmed in its dialog: gone on the bus and from the bar.
        click(d, f'#gpus tr[data-gpu="{h200}"] .mig-list li[data-instance="{gid}"]', "act-mig-destroy")
        wait(d, "the MIG destroy dialog", lambda d: d.find_element(By.ID, "mig-destroy-dialog").is_displayed())
        if f"{mig_profile} #{gid}" not in d.find_element(By.ID, "mig-destroy-dialog").text:
            raise CheckFailed("the MIG destroy dialog does not name the GPU instance")
        d.find_element(By.ID, "mig-destroy-submit").click()
        wait(d, "the destroyed GPU instance gone from the bus and the bar",
             lambda d: gid not in instances_on_bus() and segment(d, gid) is None
             and len(d.find_elements(By.CSS_SELECTOR, f'#gpus tr[data-gpu="{h200}"] .mig-list li')) == 1)
        ok(f"MIG destroy through its dialog: #{gid} gone from the bus and the bar")
        d.execute_script("window.scrollTo(0, 0)")
        shot(d, "gpus")
        # The page is never reloaded from here on: a marker set now must survive.
        d.execute_script("window.__vgpud_marker = 42")

        # 2. Create through the dialog: only types GetCapacity says fit are offered.
        d.find_element(By.ID, "create-open").click()
        wait(d, "the dialog's types", lambda d: d.find_element(By.ID, "create-type")
             .find_elements(By.CSS_SELECTOR, "option[value]:not([value=''])"))
        offered = [o.get_attribute("value") for o in
                   d.find_element(By.ID, "create-type").find_elements(By.TAG_NAME, "option")]
        type_ids = sorted({r[1] for r in manager("ListTypes")[0]})
        fits = [t for t in type_ids if manager("GetCapacity", "sa{sv}", t, "0")[0] > 0]
        if sorted(offered) != sorted(fits) or len(fits) == len(type_ids):
            raise CheckFailed(f"the dialog offers {offered}, GetCapacity says {fits} fit")
        ok(f"create dialog offers what fits ({len(fits)} of {len(type_ids)} types)")
        shot(d, "create-dialog")

        # An owner vgpud refuses: the dialog shows the D-Bus error's name and message.
        select = Select(d.find_element(By.ID, "create-type"))
        chosen = next(t for t in offered if t.startswith("nvidia"))
        select.select_by_value(chosen)
        d.find_element(By.ID, "create-owner").send_keys("evil\u202evm")
        d.find_element(By.ID, "create-submit").click()
        err = wait(d, "the create error", lambda d: d.find_element(By.ID, "create-error").is_displayed()
                   and d.find_element(By.ID, "create-error"))
        if "org.vgpud1.Error.InvalidArgument" not in err.text or "U+202E" not in err.text \
                or "null" in err.text:
            raise CheckFailed(f"the dialog's error lacks the D-Bus name or message: {err.text!r}")
        ok("errors shown with their D-Bus name and message")
        shot(d, "create-error")

        before = set(devices_on_bus())
        owner = d.find_element(By.ID, "create-owner")
        owner.clear()
        owner.send_keys("cockpit-vm")
        d.find_element(By.ID, "create-submit").click()
        wait(d, "the dialog to close", lambda d: not d.find_element(By.ID, "create-dialog").is_displayed())
        made = {u: r for u, r in devices_on_bus().items() if u not in before}
        if len(made) != 1 or list(made.values())[0][3] != "cockpit-vm" or list(made.values())[0][2] != chosen:
            raise CheckFailed(f"after the dialog's create the bus has new devices {made}")
        dialog_uuid = list(made)[0]
        wait(d, "the new device's row", lambda d: row_of(d, dialog_uuid))
        if "cockpit-vm" not in row_of(d, dialog_uuid).text:
            raise CheckFailed("the new device's row lacks its owner")
        ok(f"create through the dialog: {dialog_uuid} on the bus and on the page")

        # The types' room follows the create.
        wait(d, "the types' room after the create", lambda d: types_available(d) == bus_available())
        ok("types' room follows a create")

        # 2. A device made with vgpuctl shows without a reload.
        before = set(devices_on_bus())
        subprocess.run([args.vgpuctl, "create", chosen, "--owner", "from-vgpuctl"], env=env,
                       check=True, capture_output=True)
        made = [u for u in devices_on_bus() if u not in before]
        if len(made) != 1:
            raise CheckFailed(f"vgpuctl made {made}")
        ctl_uuid = made[0]
        wait(d, "vgpuctl's device on the page", lambda d: row_of(d, ctl_uuid))
        wait(d, "the types' room after vgpuctl's create", lambda d: types_available(d) == bus_available())
        if d.execute_script("return window.__vgpud_marker") != 42:
            raise CheckFailed("the page was reloaded")
        ok(f"vgpuctl's device {ctl_uuid} shown live, without a reload")
        d.execute_script("window.scrollTo(0, 0)")
        shot(d, "overview")

        # The filter box.
        box = d.find_element(By.ID, "device-filter")
        box.send_keys("from-vgpuctl")
        wait(d, "the filter", lambda d: [r.get_attribute("data-uuid") for r in rows(d, "devices")] == [ctl_uuid])
        shot(d, "devices-filtered")
        box.clear()
        box.send_keys(" ")  # an input event with an empty filter
        wait(d, "the filter cleared", lambda d: row_of(d, dialog_uuid) and row_of(d, ctl_uuid))
        ok("filter box")

        # The hostdev XML of a device, as GetHostdevXml renders it.
        click(d, dev(dialog_uuid), "act-xml")
        xml = wait(d, "the XML dialog", lambda d: d.find_element(By.ID, "xml-dialog").is_displayed()
                   and d.find_element(By.ID, "xml-text").get_attribute("value"))
        want = manager("GetHostdevXml", "s", dialog_uuid)[0]
        if xml != want or dialog_uuid not in xml:
            raise CheckFailed(f"the XML dialog shows {xml!r}, GetHostdevXml says {want!r}")
        d.find_element(By.ID, "xml-copy").click()
        wait(d, "the copy", lambda d: d.find_element(By.ID, "xml-copied").text == "Copied")
        shot(d, "hostdev-xml")
        d.find_element(By.CSS_SELECTOR, "#xml-dialog button[value=close]").click()
        ok("hostdev XML")

        # Stop and start.
        click(d, dev(dialog_uuid), "act-stop")
        wait(d, "the stop", lambda d: not device_prop(dialog_uuid, "Active")
             and "inactive" in row_of(d, dialog_uuid).text)
        click(d, dev(dialog_uuid), "act-start")
        wait(d, "the start", lambda d: device_prop(dialog_uuid, "Active")
             and "inactive" not in row_of(d, dialog_uuid).text)
        ok("stop and start")

        # Remove, confirmed in its dialog.
        click(d, dev(ctl_uuid), "act-remove")
        wait(d, "the remove dialog", lambda d: d.find_element(By.ID, "remove-dialog").is_displayed())
        d.find_element(By.ID, "remove-submit").click()
        wait(d, "the removed device gone from the page", lambda d: row_of(d, ctl_uuid) is None)
        if ctl_uuid in devices_on_bus():
            raise CheckFailed(f"{ctl_uuid} is still on the bus")
        wait(d, "the types' room after the remove", lambda d: types_available(d) == bus_available())
        ok("remove")

        # vgpuctl removes the dialog's device: the page follows.
        subprocess.run([args.vgpuctl, "remove", dialog_uuid], env=env, check=True, capture_output=True)
        wait(d, "vgpuctl's remove on the page", lambda d: row_of(d, dialog_uuid) is None)
        ok("a remove by vgpuctl shown live")

        # 5. Layouts: the diff, the dry run's plan as a table, and apply.
        layout_row = f'#layouts tr[data-layout="{args.layout}"]'

        def result(title):
            def find(d):
                box = d.find_element(By.ID, "layout-result")
                heads = box.find_elements(By.TAG_NAME, "h3")
                return heads and heads[0].text.startswith(title) and box
            return find

        def table_rows(box):
            return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                    for tr in box.find_elements(By.CSS_SELECTOR, "tbody tr")]

        click(d, layout_row, "act-diff")
        box = wait(d, "the diff", result("Differences from layout"))
        diff = busctl("/org/vgpud1/layouts", "org.vgpud1.Layouts", "DiffLayout", "s", args.layout)[0]
        if table_rows(box) != [list(r) for r in diff] or not diff:
            raise CheckFailed(f"the diff shown {table_rows(box)} is not DiffLayout's {diff}")
        ok(f"layout diff ({len(diff)} rows)")

        click(d, layout_row, "act-dry-run")
        table = wait(d, "the plan", result("Plan (dry run)")).find_element(By.ID, "layout-table")
        plan = busctl("/org/vgpud1/layouts", "org.vgpud1.Layouts", "ApplyLayout", "sa{sv}",
                      args.layout, "1", "dry_run", "b", "true")[0]
        shown = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                 for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
        if shown != [list(step) for step in plan] or not plan:
            raise CheckFailed(f"the plan shown {shown} is not the dry run's {plan}")
        if any(r[3] == "pool-cockpit" for r in devices_on_bus().values()):
            raise CheckFailed("the dry run made devices")
        d.execute_script("document.getElementById('layouts-card').scrollIntoView()")
        shot(d, "layout-dry-run")
        ok(f"layout dry run ({len(plan)} steps)")

        click(d, layout_row, "act-apply")
        box = wait(d, "the apply", result("Applied layout"))
        if not all(r[0] == "done" for r in table_rows(box)) or len(table_rows(box)) != len(plan):
            raise CheckFailed(f"the apply shows {table_rows(box)}")
        pool = [u for u, r in devices_on_bus().items() if r[3] == "pool-cockpit"]
        if len(pool) != 2:
            raise CheckFailed(f"after the apply the bus has the pool's devices {pool}")
        wait(d, "the pool's devices on the page", lambda d: all(row_of(d, u) for u in pool))
        ok("layout applied: its steps done, the pool's devices on the bus and on the page")

        # A GPU instance that backs a vGPU: the page's Destroy shows vgpud's refusal (Busy,
        # naming the device) as other errors are shown, and the instance stays. On the other
        # H200: MIG on, its VFs, a MIG-backed vGPU that makes its instance.
        h2 = next(g[0] for g in gpus if "H200" in g[1] and g[0] != h200)
        for cmd in [["mig", "mode", h2, "on"], ["vfs", h2, "32"]]:
            subprocess.run([args.vgpuctl, *cmd], env=env, check=True, capture_output=True)
        before = set(devices_on_bus())
        subprocess.run([args.vgpuctl, "create", "H200X-1-18C", "--parent", h2, "--owner", "mig-user"],
                       env=env, check=True, capture_output=True)
        mig_uuid = next(u for u in devices_on_bus() if u not in before)
        used = [i for i in prop("gpu", h2, "org.vgpud1.Gpu", "GpuInstances") if i[5] and i[5] != "/"]
        if len(used) != 1:
            raise CheckFailed(f"the MIG-backed vGPU {mig_uuid} left GPU instances {used}")
        used_id = used[0][0]
        used_li = f'#gpus tr[data-gpu="{h2}"] .mig-list li[data-instance="{used_id}"]'
        wait(d, "the used GPU instance listed", lambda d: d.find_elements(By.CSS_SELECTOR, used_li))
        click(d, used_li, "act-mig-destroy")
        wait(d, "the MIG destroy dialog", lambda d: d.find_element(By.ID, "mig-destroy-dialog").is_displayed())
        d.find_element(By.ID, "mig-destroy-submit").click()
        alert = wait(d, "the destroy's refusal", lambda d: d.find_elements(
            By.CSS_SELECTOR, '#alerts .alert[data-error-name="org.vgpud1.Error.Busy"]'))[0]
        if "DestroyGpuInstance" not in alert.text or "org.vgpud1.Error.Busy" not in alert.text \
                or mig_uuid not in alert.text \
                or used_id not in [i[0] for i in prop("gpu", h2, "org.vgpud1.Gpu", "GpuInstances")]:
            raise CheckFailed(f"the refused destroy shows {alert.text!r} (or the instance is gone)")
        d.execute_script("window.scrollTo(0, 0)")
        shot(d, "mig-destroy-busy")
        alert.find_element(By.CSS_SELECTOR, "button.close").click()
        ok(f"MIG destroy of an instance a vGPU uses: vgpud's Busy naming {mig_uuid} shown")
        subprocess.run([args.vgpuctl, "remove", mig_uuid], env=env, check=True, capture_output=True)
        wait(d, "the vGPU's GPU instance gone with it", lambda d: not d.find_elements(By.CSS_SELECTOR, used_li))
        restart(d)
        console_errors(d, "root")
        ok("no console errors (root)")
    finally:
        d.quit()


def as_broker():
    """A member of the group vgpud, without administrative access: reads and manages devices,
    sees changes live (the bus policy passes the signals to the group), and is refused the
    scheduler (configure-host) with what it lacks."""
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=args.bus)
    d = browser()
    try:
        d.get(args.broker_url + PAGE)
        gpus = manager("ListGpus")[0]
        wait(d, "the GPUs (broker)", lambda d: len(rows(d, "gpus")) == len(gpus))
        before = set(devices_on_bus())
        subprocess.run([args.vgpuctl, "create", "mtty-1", "--owner", "for-the-broker"], env=env,
                       check=True, capture_output=True)
        uuid = next(u for u in devices_on_bus() if u not in before)
        wait(d, "vgpuctl's device on the broker's page", lambda d: row_of(d, uuid))
        ok("a member of the group vgpud sees the GPUs and a new device live")
        click(d, dev(uuid), "act-remove")
        wait(d, "the remove dialog", lambda d: d.find_element(By.ID, "remove-dialog").is_displayed())
        d.find_element(By.ID, "remove-submit").click()
        wait(d, "the broker's remove", lambda d: row_of(d, uuid) is None and uuid not in devices_on_bus())
        ok("a member of the group vgpud removes a device")
        click(d, '#gpus tr[data-gpu="0000:d8:00.0"]', "act-scheduler")
        d.find_element(By.ID, "scheduler-submit").click()
        err = wait(d, "the scheduler's refusal", lambda d: d.find_element(By.ID, "scheduler-error").is_displayed()
                   and d.find_element(By.ID, "scheduler-error"))
        if "org.freedesktop.DBus.Error.AccessDenied" not in err.text or "administrative access" not in err.text \
                or "usermod" in err.text:
            raise CheckFailed(f"the scheduler's refusal lacks its name or what is lacking: {err.text!r}")
        shot(d, "broker-scheduler-denied")
        ok("a member of the group vgpud is refused the scheduler, told it needs administrative access")
        d.find_element(By.CSS_SELECTOR, "#scheduler-dialog button[value=cancel]").click()
        h200 = "0000:49:00.0"
        click(d, f'#gpus tr[data-gpu="{h200}"]', "act-mig-create")
        wait(d, "the MIG dialog's profiles (broker)", lambda d: d.find_element(By.ID, "mig-dialog").is_displayed()
             and d.find_element(By.ID, "mig-profile").find_elements(By.CSS_SELECTOR, "option[value]:not([value=''])"))
        before = prop("gpu", h200, "org.vgpud1.Gpu", "GpuInstances")
        d.find_element(By.ID, "mig-submit").click()
        err = wait(d, "the MIG create's refusal", lambda d: d.find_element(By.ID, "mig-error").is_displayed()
                   and d.find_element(By.ID, "mig-error"))
        if "org.freedesktop.DBus.Error.AccessDenied" not in err.text or "administrators only" not in err.text \
                or "usermod" in err.text or prop("gpu", h200, "org.vgpud1.Gpu", "GpuInstances") != before:
            raise CheckFailed(f"the MIG create's refusal lacks its name or what is lacking: {err.text!r}")
        shot(d, "broker-mig-denied")
        d.find_element(By.CSS_SELECTOR, "#mig-dialog button[value=cancel]").click()
        ok("a member of the group vgpud is refused a GPU instance, told it is for administrators")
        console_errors(d, "broker")
        ok("no console errors (broker)")
    finally:
        d.quit()


def restart(d):
    """vgpud stops (the page says so, and shows nothing stale) and starts again (the page
    follows it without a reload: its GPUs, and a device made after the restart). In the root
    page's session: cockpit-ws --local-session serves one session."""
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=args.bus)
    gpus = manager("ListGpus")[0]
    wait(d, "the GPUs before the restart", lambda d: len(rows(d, "gpus")) == len(gpus))
    d.execute_script("window.__vgpud_marker = 7")
    os.kill(args.vgpud_pid, 15)
    wait(d, "the page to say vgpud is not running",
         lambda d: "not running" in d.find_element(By.ID, "bus-state").text)
    wait(d, "nothing stale while vgpud is not running", lambda d: not rows(d, "gpus")
         and not rows(d, "devices") and not d.find_elements(By.CSS_SELECTOR, "#types tr")
         and not d.find_element(By.ID, "create-open").is_enabled())
    d.execute_script("window.scrollTo(0, 0)")
    shot(d, "vgpud-stopped")
    with open(os.path.join(args.work, "vgpud-again.log"), "w") as log:
        proc = subprocess.Popen([args.vgpud, "--root", args.simroot, "--simulate"], env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    with open(os.path.join(args.work, "vgpud-again.pid"), "w") as f:
        f.write(str(proc.pid))
    wait(d, "the page to see vgpud again",
         lambda d: d.find_element(By.ID, "bus-state").text == "" and len(rows(d, "gpus")) == len(gpus)
         and d.find_element(By.ID, "create-open").is_enabled(),
         timeout=30)
    wait(d, "the types again", lambda d: types_available(d) == bus_available())
    before = set(devices_on_bus())
    subprocess.run([args.vgpuctl, "create", "mtty-2", "--owner", "after-restart"], env=env,
                   check=True, capture_output=True)
    uuid = next(u for u in devices_on_bus() if u not in before)
    wait(d, "a device made after the restart", lambda d: row_of(d, uuid))
    if d.execute_script("return window.__vgpud_marker") != 7:
        raise CheckFailed("the page was reloaded")
    ok("vgpud stopped (said so, nothing stale) and started again: the page follows it without a reload")


def as_nobody():
    d = browser()
    try:
        d.get(args.nobody_url + PAGE)
        alert = wait(d, "the access error", lambda d: d.find_elements(
            By.CSS_SELECTOR, '#alerts .alert[data-error-name="org.freedesktop.DBus.Error.AccessDenied"]'))[0]
        if "group vgpud" not in alert.text or "administrative access" not in alert.text:
            raise CheckFailed(f"the access error does not say what the user lacks: {alert.text!r}")
        time.sleep(1)
        if rows(d, "gpus") or rows(d, "devices") or d.find_elements(By.CSS_SELECTOR, "#types tr"):
            raise CheckFailed("data shown to a user who may not read it")
        if d.find_element(By.ID, "create-open").is_enabled():
            raise CheckFailed("Create device is offered to a user who may not create")
        shot(d, "access-denied")
        ok("access denied outside the group vgpud: the error, what is lacking, no data")
        console_errors(d, "nobody")
        ok("no console errors (nobody)")
    finally:
        d.quit()


try:
    as_root()
    as_broker()
    as_nobody()
except CheckFailed as e:
    print(f"FAILED: {e}", flush=True)
    sys.exit(1)
print("ALL CHECKS PASSED", flush=True)
