//! An mdevctl definition file, `etc/mdevctl.d/<parent>/<uuid>` (written by mdevctl, libvirt
//! or an operator): an error is `Malformed`, never a panic; a definition that parses is
//! written back byte for byte as mdevctl writes it, and that reads back the same.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use vgpud::persist::mdevctl::Definition;
use vgpud::persist::PersistError;

const PARENT: &str = "0000:41:00.0";
const UUID: &str = "8f0e3bd2-9b8b-4c8b-9a5e-4a2c3e8e9a01";

fuzz_target!(|data: &[u8]| vgpud_fuzz::text(data, |text| {
    let path = Path::new("/etc/mdevctl.d/0000:41:00.0/8f0e3bd2-9b8b-4c8b-9a5e-4a2c3e8e9a01");
    match Definition::parse(PARENT, UUID, text, path) {
        Ok(def) => {
            assert_eq!((def.parent.as_str(), def.uuid.as_str()), (PARENT, UUID));
            let json = def.to_json();
            assert!(!json.is_empty() && !json.ends_with('\n'), "{json:?}");
            let again = Definition::parse(PARENT, UUID, &json, path)
                .unwrap_or_else(|e| panic!("vgpud's own definition {json:?} is refused: {e}"));
            assert_eq!(again, def, "{json:?} reads back differently");
            assert_eq!(again.to_json(), json);
        }
        Err(PersistError::Malformed { path: p, reason }) => {
            assert_eq!(p, path);
            assert!(!reason.is_empty());
        }
        Err(e) => panic!("a malformed definition gives {e:?}, not Malformed"),
    }
}));
