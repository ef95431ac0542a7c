//! libvirt XML rendered with quick-xml from the templates in `xml-templates/`.
