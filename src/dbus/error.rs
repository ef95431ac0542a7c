//! The one place engine errors become D-Bus errors.

use crate::engine::EngineError;

/// Errors of `org.vgpud1`, named `org.vgpud1.Error.<Variant>`; the message says what and why.
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.vgpud1.Error")]
pub enum Error {
    /// A bus-level error.
    #[zbus(error)]
    ZBus(zbus::Error),
    /// The device, type or GPU does not exist.
    NotFound(String),
    /// No GPU can take the type now; the message lists each GPU considered and why.
    NoCapacity(String),
    /// The request is malformed.
    InvalidArgument(String),
    /// The device already exists.
    Exists(String),
    /// The device is in use, or another call is working on it.
    Busy(String),
    /// The host failed the operation.
    Failed(String),
    /// The host cannot do this: no IOMMU, a driver that cannot change its VF count.
    NotSupported(String),
    /// It would hand a guest more than was asked for (an IOMMU group shared with other
    /// devices); pass "force" to insist.
    Unsafe(String),
    /// libvirt refused the operation; the message is libvirt's.
    Libvirt(String),
    /// libvirt cannot be reached (libvirtd not running, wrong URI).
    LibvirtUnavailable(String),
}

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Self {
        let msg = e.to_string();
        match e {
            EngineError::NotFound(_) => Error::NotFound(msg),
            EngineError::NoCapacity { .. } => Error::NoCapacity(msg),
            EngineError::InvalidArgument(_) => Error::InvalidArgument(msg),
            EngineError::Exists(_) => Error::Exists(msg),
            EngineError::Busy(_) => Error::Busy(msg),
            EngineError::NotSupported(_) => Error::NotSupported(msg),
            EngineError::Unsafe(_) => Error::Unsafe(msg),
            EngineError::Host { .. } | EngineError::Persist { .. } | EngineError::Xml { .. } => {
                Error::Failed(msg)
            }
        }
    }
}

impl From<crate::libvirt::AttachError> for Error {
    fn from(e: crate::libvirt::AttachError) -> Self {
        use crate::libvirt::{AttachError, LibvirtError};
        let msg = e.to_string();
        match e {
            AttachError::Engine(inner) => inner.into(),
            AttachError::Libvirt(LibvirtError::NoDomain { .. }) => Error::NotFound(msg),
            AttachError::Libvirt(LibvirtError::Unavailable { .. }) => {
                Error::LibvirtUnavailable(msg)
            }
            AttachError::Libvirt(LibvirtError::Refused { .. }) => Error::Libvirt(msg),
            AttachError::OwnedByOther { .. } => Error::Busy(msg),
            AttachError::InvalidArgument(_) => Error::InvalidArgument(msg),
        }
    }
}

/// Result of `org.vgpud1` methods.
pub type Result<T> = std::result::Result<T, Error>;
