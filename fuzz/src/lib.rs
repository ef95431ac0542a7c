//! What every fuzz target shares: the input rules and a watch on the heap.
//!
//! Each target gets its input through [`text`] or [`bytes`]: inputs above [`MAX_INPUT`] are
//! skipped (vgpud's readers refuse files above 1 MiB before any parser sees them; the fuzzer
//! learns nothing from sheer length), and while the target runs, a counting global
//! allocator records the peak of the heap. An input that makes the heap grow by more than
//! [`heap_budget`] of its length fails the run: a parser that allocates wildly for small
//! input is a bug here, even where it does not crash. (libFuzzer's own `-malloc_limit_mb`
//! needs a sanitizer's allocator hooks, which a stable build has not.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The longest input a target looks at, in bytes.
pub const MAX_INPUT: usize = 64 * 1024;

/// Bytes allocated and not freed.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The highest [`LIVE`] since the current input started.
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting.
struct Counting;

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(by: usize) {
    LIVE.fetch_sub(by, Ordering::Relaxed);
}

// SAFETY: every call is passed on to the system allocator unchanged; the counters are only
// read, never used to allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `layout` is the system allocator's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is, from the system's.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from the system allocator with `layout`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// How much the heap may grow while one input of `len` bytes is parsed: 1 MiB plus 256
/// bytes per input byte (a JSON or XML tree of small nodes takes 20 to 60).
pub fn heap_budget(len: usize) -> usize {
    (1 << 20) + 256 * len
}

/// Runs `f` on the input, with the heap watched; skips inputs over [`MAX_INPUT`].
pub fn bytes(data: &[u8], f: impl FnOnce(&[u8])) {
    if data.len() > MAX_INPUT {
        return;
    }
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    f(data);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    let budget = heap_budget(data.len());
    assert!(
        peak <= budget,
        "the heap grew by {peak} bytes for an input of {} bytes (budget {budget})",
        data.len()
    );
}

/// Runs `f` on the input as text, with the heap watched; skips inputs that are not UTF-8
/// (vgpud's readers refuse them before any parser sees them) or over [`MAX_INPUT`].
pub fn text(data: &[u8], f: impl FnOnce(&str)) {
    bytes(data, |data| {
        if let Ok(text) = std::str::from_utf8(data) {
            f(text);
        }
    });
}

/// How vgpud reads one of its JSON state files (device records, intents, SR-IOV settings):
/// `vgpud::persist::parse_state_json`, the parse step of its directory reader. `Ok(None)`:
/// a newer format version, which vgpud refuses to touch; `Err`: a bad file, which vgpud
/// sets aside.
pub fn read_state_json<T: serde::de::DeserializeOwned>(
    text: &str,
    supported: u32,
) -> Result<Option<T>, String> {
    match vgpud::persist::parse_state_json(text, "state file", supported) {
        Ok(value) => Ok(Some(value)),
        Err(vgpud::persist::StateTextError::Newer { .. }) => Ok(None),
        Err(vgpud::persist::StateTextError::Bad(reason)) => Err(reason),
    }
}
