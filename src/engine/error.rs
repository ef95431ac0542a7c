//! Errors of the engine: what went wrong, in terms a caller can act on.

use crate::host::HostError;
use crate::persist::PersistError;

/// Why one GPU could not take a requested type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The GPU considered.
    pub gpu: String,
    /// Why it could not take the type.
    pub reason: String,
}

/// An error of the engine. Each variant names the device, type or path involved.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The device, type or GPU asked for does not exist.
    #[error("{0}")]
    NotFound(String),
    /// No GPU can take the requested type now.
    #[error("no GPU can take a {type_query} now: {}", format_refusals(.refusals))]
    NoCapacity {
        /// The type asked for.
        type_query: String,
        /// Each GPU considered and why it could not take the type.
        refusals: Vec<Refusal>,
    },
    /// The request is malformed.
    #[error("{0}")]
    InvalidArgument(String),
    /// The device already exists.
    #[error("{0}")]
    Exists(String),
    /// The device is in use (a GPU that draws the host's console among others: the caller
    /// may insist with "force").
    #[error("{0}")]
    Busy(String),
    /// The host cannot do this (no IOMMU, a driver without the capability).
    #[error("{0}")]
    NotSupported(String),
    /// A change waits for a GPU reset (a pending MIG mode).
    #[error("{0}")]
    NeedsReset(String),
    /// No room for a GPU instance (no free placement or slices).
    #[error("{0}")]
    NoRoom(String),
    /// The NVIDIA driver's control plane (NVML) failed.
    #[error("{0}")]
    Control(String),
    /// Doing it would hand the guest more than was asked for (an IOMMU group shared with
    /// other devices); the caller may insist with "force".
    #[error("{0}")]
    Unsafe(String),
    /// The host refused or failed an operation.
    #[error("{context}: {source}")]
    Host {
        /// What vgpud was doing.
        context: String,
        /// The host error, naming the path.
        source: HostError,
    },
    /// vgpud's own files (definitions, records, intents) could not be written.
    #[error("{context}: {source}")]
    Persist {
        /// What vgpud was doing.
        context: String,
        /// The persistence error, naming the file.
        source: PersistError,
    },
    /// Rendering XML failed.
    #[error("rendering XML for {uuid}: {message}")]
    Xml {
        /// The device.
        uuid: String,
        /// What went wrong.
        message: String,
    },
}

fn format_refusals(refusals: &[Refusal]) -> String {
    if refusals.is_empty() {
        return "no GPU offers it".to_string();
    }
    refusals
        .iter()
        .map(|r| format!("{}: {}", r.gpu, r.reason))
        .collect::<Vec<_>>()
        .join("; ")
}

impl EngineError {
    /// Wraps a host error with what vgpud was doing.
    pub fn host(context: impl Into<String>, source: HostError) -> Self {
        EngineError::Host {
            context: context.into(),
            source,
        }
    }
}

impl EngineError {
    /// Wraps a persistence error with what vgpud was doing.
    pub fn persist(context: impl Into<String>, source: PersistError) -> Self {
        EngineError::Persist {
            context: context.into(),
            source,
        }
    }
}

/// Result of engine operations.
pub type EngineResult<T> = Result<T, EngineError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_capacity_names_every_gpu_and_reason() {
        let e = EngineError::NoCapacity {
            type_query: "RTX6000-4Q".into(),
            refusals: vec![
                Refusal {
                    gpu: "0000:41:00.0".into(),
                    reason: "all 6 instances in use".into(),
                },
                Refusal {
                    gpu: "0000:42:00.0".into(),
                    reason: "runs GRID RTX6000-1Q".into(),
                },
            ],
        };
        let msg = e.to_string();
        assert!(
            msg.contains("0000:41:00.0: all 6 instances in use"),
            "{msg}"
        );
        assert!(msg.contains("0000:42:00.0: runs GRID RTX6000-1Q"), "{msg}");
    }
}
