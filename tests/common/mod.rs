//! Shared parts of the integration tests.
#![allow(dead_code)]
pub mod authorization;
pub mod daemon;
pub mod golden;
pub mod introspection;
pub mod libvirt;
pub mod libvirtd;
pub mod metrics;
pub mod monitor;
pub mod nvml;
pub mod proxy;
pub mod setup;
pub mod skip;
pub mod vgpuctl;
