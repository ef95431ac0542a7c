//! The one place engine errors become D-Bus errors.

use crate::engine::EngineError;

/// Errors of `org.vgpud1`, named `org.vgpud1.Error.<Variant>` (the standard
/// `org.freedesktop.DBus.Error.*` names for access refusals); the message says what and why.
#[derive(Debug)]
pub enum Error {
    /// A bus-level error.
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
    /// The change waits for a GPU reset (a pending MIG mode).
    NeedsReset(String),
    /// libvirt refused the operation; the message is libvirt's.
    Libvirt(String),
    /// libvirt cannot be reached (libvirtd not running, wrong URI).
    LibvirtUnavailable(String),
    /// `org.freedesktop.DBus.Error.AccessDenied`: the caller may not do this.
    AccessDenied(String),
    /// `org.freedesktop.DBus.Error.InteractiveAuthorizationRequired`: the caller could be
    /// allowed after authenticating, and did not allow interaction.
    InteractiveAuthorizationRequired(String),
}

impl Error {
    /// The D-Bus error name and, but for a bus-level error, the message.
    fn parts(&self) -> (&'static str, Option<&String>) {
        match self {
            Error::ZBus(_) => ("org.freedesktop.zbus.Error", None),
            Error::NotFound(m) => ("org.vgpud1.Error.NotFound", Some(m)),
            Error::NoCapacity(m) => ("org.vgpud1.Error.NoCapacity", Some(m)),
            Error::InvalidArgument(m) => ("org.vgpud1.Error.InvalidArgument", Some(m)),
            Error::Exists(m) => ("org.vgpud1.Error.Exists", Some(m)),
            Error::Busy(m) => ("org.vgpud1.Error.Busy", Some(m)),
            Error::Failed(m) => ("org.vgpud1.Error.Failed", Some(m)),
            Error::NotSupported(m) => ("org.vgpud1.Error.NotSupported", Some(m)),
            Error::Unsafe(m) => ("org.vgpud1.Error.Unsafe", Some(m)),
            Error::NeedsReset(m) => ("org.vgpud1.Error.NeedsReset", Some(m)),
            Error::Libvirt(m) => ("org.vgpud1.Error.Libvirt", Some(m)),
            Error::LibvirtUnavailable(m) => ("org.vgpud1.Error.LibvirtUnavailable", Some(m)),
            Error::AccessDenied(m) => ("org.freedesktop.DBus.Error.AccessDenied", Some(m)),
            Error::InteractiveAuthorizationRequired(m) => (
                "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired",
                Some(m),
            ),
        }
    }

    /// The D-Bus error name.
    pub fn name(&self) -> &'static str {
        self.parts().0
    }

    /// The message.
    pub fn message(&self) -> String {
        match (self, self.parts().1) {
            (_, Some(m)) => m.clone(),
            (Error::ZBus(e), None) => e.to_string(),
            (_, None) => String::new(),
        }
    }

    /// A refusal of access, with its message cut to [`MAX_MESSAGE`].
    pub fn access_denied(msg: String) -> Self {
        Error::AccessDenied(capped(msg))
    }

    /// A refusal that authenticating could lift, with its message cut to [`MAX_MESSAGE`].
    pub fn interactive_authorization_required(msg: String) -> Self {
        Error::InteractiveAuthorizationRequired(capped(msg))
    }
}

impl zbus::DBusError for Error {
    fn name(&self) -> zbus::names::ErrorName<'_> {
        zbus::names::ErrorName::from_static_str_unchecked(Error::name(self))
    }

    fn description(&self) -> Option<&str> {
        self.parts().1.map(String::as_str)
    }

    fn create_reply(&self, call: &zbus::message::Header<'_>) -> zbus::Result<zbus::Message> {
        zbus::Message::error(call, Error::name(self)).build(&(self.message(),))
    }
}

impl From<zbus::Error> for Error {
    fn from(e: zbus::Error) -> Self {
        Error::ZBus(e)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.name(), self.message())
    }
}

impl std::error::Error for Error {}

/// The longest error message sent: errors quote their inputs, and an input may be long.
pub const MAX_MESSAGE: usize = 2048;

/// A message cut to [`MAX_MESSAGE`] bytes (at a character boundary).
pub(super) fn capped(mut msg: String) -> String {
    if msg.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !msg.is_char_boundary(end) {
            end -= 1;
        }
        msg.truncate(end);
        msg.push_str("...");
    }
    msg
}

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Self {
        let msg = capped(e.to_string());
        match e {
            EngineError::NotFound(_) => Error::NotFound(msg),
            EngineError::NoCapacity { .. } => Error::NoCapacity(msg),
            EngineError::InvalidArgument(_) => Error::InvalidArgument(msg),
            EngineError::Exists(_) => Error::Exists(msg),
            EngineError::Busy(_) => Error::Busy(msg),
            EngineError::NotSupported(_) => Error::NotSupported(msg),
            EngineError::Unsafe(_) => Error::Unsafe(msg),
            EngineError::NeedsReset(_) => Error::NeedsReset(msg),
            EngineError::NoRoom(_) => Error::NoCapacity(msg),
            EngineError::Host { .. }
            | EngineError::Persist { .. }
            | EngineError::Xml { .. }
            | EngineError::Control(_) => Error::Failed(msg),
        }
    }
}

impl From<crate::libvirt::AttachError> for Error {
    fn from(e: crate::libvirt::AttachError) -> Self {
        use crate::libvirt::{AttachError, LibvirtError};
        let msg = capped(e.to_string());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut() {
        let e: Error = EngineError::InvalidArgument("é".repeat(10_000)).into();
        let Error::InvalidArgument(msg) = e else {
            panic!("kind")
        };
        assert!(msg.len() <= MAX_MESSAGE + 3, "{}", msg.len());
        assert!(msg.ends_with("..."));
    }
}
