//! Extracting interface blocks from introspection data, to compare with dbus/org.vgpud1.xml.

/// The `<interface name="IFACE">…</interface>` block of an introspection document, re-indented
/// to sit two spaces inside `<node>`.
pub fn interface_block(xml: &str, iface: &str) -> String {
    let open = format!("<interface name=\"{iface}\">");
    let start = xml
        .find(&open)
        .unwrap_or_else(|| panic!("{iface} not in:\n{xml}"));
    let line_start = xml[..start].rfind('\n').map_or(0, |i| i + 1);
    let base = start - line_start;
    let end = xml[start..].find("</interface>").expect("closing tag") + start;
    let end = end + "</interface>".len();
    let mut out = String::new();
    for line in xml[line_start..end].lines() {
        if line.trim().is_empty() {
            continue;
        }
        let cut = base.min(line.len() - line.trim_start().len());
        out.push_str("  ");
        out.push_str(&line[cut..]);
        out.push('\n');
    }
    out
}

/// A complete introspection document around interface blocks.
pub fn document(blocks: &str) -> String {
    format!(
        "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<!-- org.vgpud1: the manager at /org/vgpud1, GPUs at /org/vgpud1/gpu/<escaped address>,\n     devices at /org/vgpud1/device/<escaped uuid>. Generated from the running daemon;\n     a test compares it with what the daemon reports. -->\n<node>\n{blocks}</node>\n"
    )
}

/// vgpud's introspection data of the object at `path`.
#[allow(dead_code)]
pub async fn introspect(conn: &zbus::Connection, path: &str) -> String {
    let proxy = zbus::fdo::IntrospectableProxy::builder(conn)
        .destination("org.vgpud1")
        .path(path)
        .build()
        .await
        .expect("introspectable");
    proxy.introspect().await.expect("Introspect")
}
