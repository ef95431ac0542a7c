//! Declarative layouts: named files (`etc/vgpud/layouts/NAME.toml`) that say what each GPU,
//! or each GPU of a model, should look like (VFs, heterogeneous mode, MIG mode and GPU
//! instances, the scheduler, pools of devices to keep made), planned as ordered steps by a
//! pure function and applied non-destructively: a device that is not the layout's own pool's,
//! or that a guest holds, and a GPU instance a device uses, are never removed or changed;
//! the steps they stand in the way of are refused, naming them.

pub mod apply;
pub mod file;
pub mod hysteresis;
pub mod plan;
pub mod pools;
pub mod reshape;

pub use apply::{apply, host_view, Outcome, Status};
pub use file::{Layout, LayoutError};

#[cfg(test)]
mod plan_tests;
