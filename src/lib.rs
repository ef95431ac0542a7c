//! vgpud: turns the GPUs of a Linux KVM host into shareable, assignable devices for libvirt
//! guests, and serves them on the system bus as `org.vgpud1`.
//!
//! Layers, from the bottom up:
//! - [`host`]: every access to the host, rooted at one path; on a simulated host, writes and
//!   tool runs go through its seam ([`host::SimulatedKernel`]) to the `vgpud-sim` crate;
//! - [`catalog`]: what vgpud knows about hardware that sysfs does not say;
//! - [`config`]: the configuration file, `etc/vgpud/vgpud.toml`;
//! - [`model`]: GPUs, types and devices;
//! - [`discovery`]: reads the host into the model;
//! - [`persist`]: mdevctl definitions, vgpud's own records and the intent journal on disk;
//! - [`plan`]: multi-step host changes (driver binding, VF counts) as planned lists of steps;
//! - [`engine`]: the core: inventory, placement, create and remove, no D-Bus in it;
//! - [`demand`]: what is asked for per type, in 5-minute buckets, and its forecast;
//! - [`xml`]: libvirt XML rendered from templates;
//! - [`libvirt`]: attach and detach through libvirt, behind a trait with a test double;
//! - [`dbus`]: the thin `org.vgpud1` adapter over the engine;
//! - [`daemon`]: start-up, bus name, readiness and shutdown;
//! - [`hook`]: `vgpud libvirt-hook`, the client side run by libvirt's qemu hook.
//! - [`audit`]: the audit log, fed by the engine's event stream.

pub mod audit;
pub mod catalog;
pub mod config;
pub mod daemon;
pub mod dbus;
pub mod demand;
pub mod discovery;
pub mod engine;
pub mod gpu_control;
pub mod hook;
pub mod host;
pub mod layout;
pub mod libvirt;
pub mod metrics;
pub mod model;
pub mod persist;
pub mod plan;
pub mod xml;
