//! vgpud's records under `var/lib/vgpud`: a device record (`devices/<uuid>.json`) and an
//! SR-IOV settings file (`sriov/<pf>.json`), read as vgpud reads them; whatever reads is
//! written back as vgpud writes it and reads back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpud::host::Host;
use vgpud::persist::{sriov, state};

fuzz_target!(|data: &[u8]| vgpud_fuzz::text(data, |text| {
    if let Ok(Some(record)) =
        vgpud_fuzz::read_state_json::<state::DeviceRecord>(text, state::VERSION)
    {
        let host = Host::new("/nonexistent-fuzz-root");
        let file = state::file(&host, &record);
        let written = String::from_utf8(file.content).expect("a record is written as UTF-8");
        let again = vgpud_fuzz::read_state_json::<state::DeviceRecord>(&written, state::VERSION);
        assert_eq!(again, Ok(Some(record.clone())), "{written:?}");
        assert_eq!(file.path, state::path(&host, &record.uuid));
    }
    if let Ok(Some(settings)) =
        vgpud_fuzz::read_state_json::<sriov::GpuSettings>(text, sriov::VERSION)
    {
        // What sriov::write writes.
        let mut written = serde_json::to_string_pretty(&settings).expect("serializes");
        written.push('\n');
        let again = vgpud_fuzz::read_state_json::<sriov::GpuSettings>(&written, sriov::VERSION);
        assert_eq!(again, Ok(Some(settings)), "{written:?}");
    }
}));
