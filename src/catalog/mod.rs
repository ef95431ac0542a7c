//! The hardware tables (the `vgpud-catalog` crate of the workspace): PCI names, NVIDIA boards
//! and vGPU types, Intel GVT-g types.

pub use vgpud_catalog::*;
