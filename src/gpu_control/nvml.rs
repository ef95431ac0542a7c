//! [`NvmlControl`]: the control plane over `nvml-wrapper` (and, for the calls it lacks, the
//! `vgpud-nvml-raw` crate).
