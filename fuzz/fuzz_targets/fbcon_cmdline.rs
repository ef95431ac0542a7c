//! The kernel command line (`/proc/cmdline`) as the console rule reads it: `fbcon=map:` and
//! `fbcon=vc:` within the kernel's bounds (consoles 0 to 62, framebuffers 0 to 31, a map
//! never empty), and the decision over them defined for every foreground console.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpud::discovery::console::{
    decide, fbcon_framebuffer, ConsoleFacts, FbDevice, FbconOptions, Framebuffer, VtConsole,
};

fuzz_target!(|data: &[u8]| vgpud_fuzz::text(data, |text| {
    let o = FbconOptions::from_cmdline(text);
    assert!(o.first_vc <= o.last_vc && o.last_vc < 63, "{o:?}");
    if let Some(map) = &o.map {
        assert!(!map.is_empty() && map.iter().all(|&fb| fb < 32), "{o:?}");
    }
    let facts = ConsoleFacts {
        vtconsoles: Some(vec![VtConsole {
            id: "vtcon1".into(),
            name: "(M) frame buffer device".into(),
            bound: true,
        }]),
        foreground: 1,
        fbcon: o,
        framebuffers: vec![
            Framebuffer {
                index: 0,
                name: "EFI VGA".into(),
                device: FbDevice::Other("efi-framebuffer.0".into()),
            },
            Framebuffer {
                index: 1,
                name: "nvidia-drmdrmfb".into(),
                device: FbDevice::Pci("0000:41:00.0".into()),
            },
        ],
        boot_vga: Some("0000:41:00.0".into()),
    };
    for tty in 1..=63 {
        let facts = ConsoleFacts {
            foreground: tty,
            ..facts.clone()
        };
        let fb = fbcon_framebuffer(&facts, tty - 1);
        let console = decide(&facts);
        // fbcon takes the console: the boot VGA device draws it, on either framebuffer.
        assert_eq!(
            fb.is_some(),
            console.is_some(),
            "tty{tty}: {fb:?} {console:?}"
        );
        if let Some(c) = console {
            assert_eq!(c.function, "0000:41:00.0");
            let _ = c.reason.to_string();
        }
    }
}));
