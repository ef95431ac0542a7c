//! An open intent of the journal, `var/lib/vgpud/intents/<uuid>.json`, read as vgpud reads it
//! at start (before any replay); whatever reads is written back as `intent::open` writes it
//! and reads back the same operation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpud::persist::intent::{Intent, VERSION};

fuzz_target!(|data: &[u8]| vgpud_fuzz::text(data, |text| {
    if let Ok(Some(intent)) = vgpud_fuzz::read_state_json::<Intent>(text, VERSION) {
        // What intent::open writes.
        let written = serde_json::to_string(&intent).expect("serializes");
        let again = vgpud_fuzz::read_state_json::<Intent>(&written, VERSION);
        assert_eq!(again, Ok(Some(intent)), "{written:?}");
    }
}));
