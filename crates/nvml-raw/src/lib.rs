//! The NVML calls that `nvml-wrapper` 0.13 does not wrap, or wraps wrongly (hardware.md §6.3),
//! called through the wrapper's loaded library (`Nvml::lib()`), each one documented and checked.
//! This is the only crate of vgpud that may use `unsafe`.
