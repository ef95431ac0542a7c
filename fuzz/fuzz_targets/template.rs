//! A template (`etc/vgpud/templates/<name>.xml`, the operator's): [`Template::references`]
//! and [`Template::render`] agree (a template whose references read renders once they are
//! set); what renders is well-formed XML, and a fixpoint (rendered again, it
//! is the same); the user-template store accepts only templates within the domain variables
//! and lists, and a domain rendered with one the store accepts reads back.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use quick_xml::events::Event;
use quick_xml::Reader;
use vgpud::xml::{
    parse_domain, render_domain_with, Context, DomainDevice, Graphics, Template, TemplateStore,
    VdiDomain, XmlError, DOMAIN_FRAGMENT_LISTS, DOMAIN_VARIABLES,
};

/// The user template directory of this process, in the temporary directory (`fuzz/run`
/// points `TMPDIR` at its scratch directory, which it removes: libFuzzer exits without
/// running destructors).
fn user_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("vgpud-fuzz-templates-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("template directory");
        dir
    })
}

fn well_formed(xml: &str) -> Result<(), String> {
    let mut reader = Reader::from_str(xml);
    let mut depth = 0usize;
    loop {
        match reader.read_event().map_err(|e| e.to_string())? {
            Event::Start(_) => depth += 1,
            Event::End(_) => depth -= 1,
            Event::Eof => break,
            _ => {}
        }
    }
    if depth == 0 {
        Ok(())
    } else {
        Err(format!("{depth} elements left open"))
    }
}

fn domain() -> VdiDomain {
    VdiDomain {
        name: "fuzz".into(),
        uuid: Some("6d1c7c1e-4a1d-4f38-9e59-3a3e1b0b7a11".into()),
        memory_mib: 2048,
        vcpus: 2,
        disk: Some("/var/lib/libvirt/images/fuzz.qcow2".into()),
        network: Some("default".into()),
        uefi: true,
        graphics: Graphics::Spice,
        devices: vec![
            DomainDevice::Mdev {
                uuid: "3b4f1f6e-8e2a-4c71-b0a5-0d1f8c2b9e01".into(),
                type_id: "nvidia-259".into(),
                type_name: "GRID RTX6000-4Q".into(),
                parent: "0000:3b:00.0".into(),
                display: true,
            },
            DomainDevice::Pci {
                uuid: "3b4f1f6e-8e2a-4c71-b0a5-0d1f8c2b9e02".into(),
                address: "0000:3d:00.4".into(),
                managed: false,
                type_id: "nvidia-1150".into(),
                parent: "0000:3d:00.0".into(),
            },
        ],
    }
}

fuzz_target!(|data: &[u8]| vgpud_fuzz::text(data, |text| {
    let template = Template::new("fuzz.xml", text);
    let refs = template.references();
    let mut all_set = Context::new();
    if let Ok(refs) = &refs {
        // Not empty: an empty value renders `<a>{v}</a>` as `<a></a>`, which renders again as
        // `<a/>` (the same XML, not the same text).
        for v in &refs.variables {
            all_set.set(v.as_str(), "v");
        }
        for l in &refs.lists {
            all_set.set_fragments(l.as_str(), Vec::new());
        }
    }
    // With every name it refers to set, a template whose references read renders (both walk
    // every branch). When they do not read, nothing is set and the render may skip the
    // branch at fault, so it may or may not render.
    let rendered = template.render(&all_set);
    if refs.is_ok() {
        assert!(
            rendered.is_ok(),
            "references {refs:?} but render {rendered:?}"
        );
    }
    let _ = template.render(&Context::new());
    if let Ok(out) = &rendered {
        assert!(out.ends_with('\n'));
        well_formed(out).unwrap_or_else(|e| panic!("rendered output is malformed ({e}):\n{out}"));
        if !out.contains(['{', '}']) {
            let again = Template::new("again", out.as_str())
                .render(&Context::new())
                .unwrap_or_else(|e| panic!("rendered output does not render ({e}):\n{out}"));
            assert_eq!(&again, out, "rendering is not a fixpoint");
        }
    }

    // The same text as a user template of the store.
    let dir = user_dir();
    std::fs::write(dir.join("fuzz.xml"), text).expect("write the template");
    let store = TemplateStore::new(Some(dir.clone()));
    match store.get("fuzz") {
        Ok(user) => {
            assert_eq!(user.source(), text);
            let refs = refs.expect("the store took a template whose references do not read");
            assert!(refs
                .variables
                .iter()
                .all(|v| DOMAIN_VARIABLES.contains(&v.as_str())));
            assert!(refs
                .lists
                .iter()
                .all(|l| DOMAIN_FRAGMENT_LISTS.contains(&l.as_str())));
            if let Ok(xml) = render_domain_with(&user, &domain()) {
                let summary = parse_domain(&xml)
                    .unwrap_or_else(|e| panic!("a rendered domain does not read ({e}):\n{xml}"));
                assert_eq!(summary.devices.len(), 2);
            }
        }
        Err(
            XmlError::Template { .. } | XmlError::UnsupportedName { .. } | XmlError::Write { .. },
        ) => {
            assert!(
                refs.is_err() || matches!(store.get("fuzz"), Err(XmlError::UnsupportedName { .. }))
            );
        }
        Err(e) => panic!("the store refuses a readable file with {e:?}"),
    }
}));
