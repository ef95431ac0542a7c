//! The errors of `org.vgpud1` as a Rust enum: one variant per documented D-Bus error name.

use serde::Serialize;

/// A failed call to vgpud: the daemon's answer (`org.vgpud1.Error.*` and the standard access
/// refusals, each with vgpud's message), or the bus failing before an answer came.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `org.vgpud1.Error.InvalidArgument`: the request is malformed.
    #[error("org.vgpud1.Error.InvalidArgument: {0}")]
    InvalidArgument(String),
    /// `org.vgpud1.Error.NotFound`: no such device, GPU, type or layout.
    #[error("org.vgpud1.Error.NotFound: {0}")]
    NotFound(String),
    /// `org.vgpud1.Error.NoCapacity`: no GPU can take the type now.
    #[error("org.vgpud1.Error.NoCapacity: {0}")]
    NoCapacity(String),
    /// `org.vgpud1.Error.Exists`: the UUID is in use.
    #[error("org.vgpud1.Error.Exists: {0}")]
    Exists(String),
    /// `org.vgpud1.Error.Busy`: in use, or another call works on it.
    #[error("org.vgpud1.Error.Busy: {0}")]
    Busy(String),
    /// `org.vgpud1.Error.NotSupported`: the host cannot do this.
    #[error("org.vgpud1.Error.NotSupported: {0}")]
    NotSupported(String),
    /// `org.vgpud1.Error.NeedsReset`: the change waits for a GPU reset.
    #[error("org.vgpud1.Error.NeedsReset: {0}")]
    NeedsReset(String),
    /// `org.vgpud1.Error.Unsafe`: the guest would get more than asked for.
    #[error("org.vgpud1.Error.Unsafe: {0}")]
    Unsafe(String),
    /// `org.vgpud1.Error.Failed`: the host failed the operation.
    #[error("org.vgpud1.Error.Failed: {0}")]
    Failed(String),
    /// `org.vgpud1.Error.Libvirt`: libvirt refused.
    #[error("org.vgpud1.Error.Libvirt: {0}")]
    Libvirt(String),
    /// `org.vgpud1.Error.LibvirtUnavailable`: libvirt cannot be reached.
    #[error("org.vgpud1.Error.LibvirtUnavailable: {0}")]
    LibvirtUnavailable(String),
    /// `org.freedesktop.DBus.Error.AccessDenied`: polkit or the bus policy refused.
    #[error("org.freedesktop.DBus.Error.AccessDenied: {0}")]
    AccessDenied(String),
    /// `org.freedesktop.DBus.Error.InteractiveAuthorizationRequired`.
    #[error("org.freedesktop.DBus.Error.InteractiveAuthorizationRequired: {0}")]
    InteractiveAuthorizationRequired(String),
    /// `org.freedesktop.DBus.Error.ServiceUnknown` and `NameHasNoOwner`: vgpud is not running
    /// on that bus.
    #[error("{name}: {message}")]
    NotRunning {
        /// The D-Bus error name.
        name: String,
        /// The bus's message.
        message: String,
    },
    /// Any other D-Bus error answer.
    #[error("{name}: {message}")]
    Other {
        /// The D-Bus error name.
        name: String,
        /// Its message.
        message: String,
    },
    /// The bus failed (no connection, a reply of the wrong type).
    #[error("{0}")]
    Bus(zbus::Error),
}

/// What class of failure an error is: vgpuctl's exit codes and a broker's retry policy
/// follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorClass {
    /// The request was wrong: fix it before retrying.
    Usage,
    /// The device, GPU, type or layout does not exist.
    NotFound,
    /// The host lacks room or the thing is in use now: a retry later may succeed.
    Conflict,
    /// The host cannot do it, or the host or libvirt failed.
    Host,
    /// The caller may not do it.
    Denied,
    /// vgpud cannot be reached.
    Unreachable,
}

impl Error {
    /// The D-Bus error name (for a bus failure, `org.freedesktop.zbus.Error`).
    pub fn name(&self) -> &str {
        match self {
            Error::InvalidArgument(_) => "org.vgpud1.Error.InvalidArgument",
            Error::NotFound(_) => "org.vgpud1.Error.NotFound",
            Error::NoCapacity(_) => "org.vgpud1.Error.NoCapacity",
            Error::Exists(_) => "org.vgpud1.Error.Exists",
            Error::Busy(_) => "org.vgpud1.Error.Busy",
            Error::NotSupported(_) => "org.vgpud1.Error.NotSupported",
            Error::NeedsReset(_) => "org.vgpud1.Error.NeedsReset",
            Error::Unsafe(_) => "org.vgpud1.Error.Unsafe",
            Error::Failed(_) => "org.vgpud1.Error.Failed",
            Error::Libvirt(_) => "org.vgpud1.Error.Libvirt",
            Error::LibvirtUnavailable(_) => "org.vgpud1.Error.LibvirtUnavailable",
            Error::AccessDenied(_) => "org.freedesktop.DBus.Error.AccessDenied",
            Error::InteractiveAuthorizationRequired(_) => {
                "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
            }
            Error::NotRunning { name, .. } | Error::Other { name, .. } => name,
            Error::Bus(_) => "org.freedesktop.zbus.Error",
        }
    }

    /// The message: vgpud's (what and why), or the bus's.
    pub fn message(&self) -> String {
        match self {
            Error::InvalidArgument(m)
            | Error::NotFound(m)
            | Error::NoCapacity(m)
            | Error::Exists(m)
            | Error::Busy(m)
            | Error::NotSupported(m)
            | Error::NeedsReset(m)
            | Error::Unsafe(m)
            | Error::Failed(m)
            | Error::Libvirt(m)
            | Error::LibvirtUnavailable(m)
            | Error::AccessDenied(m)
            | Error::InteractiveAuthorizationRequired(m) => m.clone(),
            Error::NotRunning { message, .. } | Error::Other { message, .. } => message.clone(),
            Error::Bus(e) => e.to_string(),
        }
    }

    /// The class of the failure.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::InvalidArgument(_) => ErrorClass::Usage,
            Error::NotFound(_) => ErrorClass::NotFound,
            Error::NoCapacity(_) | Error::Exists(_) | Error::Busy(_) | Error::NeedsReset(_) => {
                ErrorClass::Conflict
            }
            // vgpud answers this at once when it has too many calls to answer: retry later.
            Error::Other { name, .. } if name == "org.freedesktop.DBus.Error.LimitsExceeded" => {
                ErrorClass::Conflict
            }
            Error::NotSupported(_)
            | Error::Unsafe(_)
            | Error::Failed(_)
            | Error::Libvirt(_)
            | Error::LibvirtUnavailable(_)
            | Error::Other { .. } => ErrorClass::Host,
            Error::AccessDenied(_) | Error::InteractiveAuthorizationRequired(_) => {
                ErrorClass::Denied
            }
            Error::NotRunning { .. } | Error::Bus(_) => ErrorClass::Unreachable,
        }
    }

    /// The error of a D-Bus error answer.
    pub fn from_answer(name: &str, message: String) -> Self {
        match name {
            "org.vgpud1.Error.InvalidArgument" | "org.freedesktop.DBus.Error.InvalidArgs" => {
                Error::InvalidArgument(message)
            }
            "org.vgpud1.Error.NotFound" => Error::NotFound(message),
            "org.vgpud1.Error.NoCapacity" => Error::NoCapacity(message),
            "org.vgpud1.Error.Exists" => Error::Exists(message),
            "org.vgpud1.Error.Busy" => Error::Busy(message),
            "org.vgpud1.Error.NotSupported" => Error::NotSupported(message),
            "org.vgpud1.Error.NeedsReset" => Error::NeedsReset(message),
            "org.vgpud1.Error.Unsafe" => Error::Unsafe(message),
            "org.vgpud1.Error.Failed" => Error::Failed(message),
            "org.vgpud1.Error.Libvirt" => Error::Libvirt(message),
            "org.vgpud1.Error.LibvirtUnavailable" => Error::LibvirtUnavailable(message),
            "org.freedesktop.DBus.Error.AccessDenied" => Error::AccessDenied(message),
            "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired" => {
                Error::InteractiveAuthorizationRequired(message)
            }
            "org.freedesktop.DBus.Error.ServiceUnknown"
            | "org.freedesktop.DBus.Error.NameHasNoOwner" => Error::NotRunning {
                name: name.to_string(),
                message,
            },
            _ => Error::Other {
                name: name.to_string(),
                message,
            },
        }
    }
}

impl From<zbus::Error> for Error {
    fn from(e: zbus::Error) -> Self {
        match e {
            zbus::Error::MethodError(name, message, _) => {
                Error::from_answer(name.as_str(), message.unwrap_or_default())
            }
            zbus::Error::FDO(fdo) => {
                let name = fdo_name(&fdo);
                let message = fdo.to_string();
                // zbus formats an fdo error as "Name: message"; keep the message only.
                let message = message
                    .split_once(": ")
                    .map(|(_, m)| m.to_string())
                    .unwrap_or(message);
                Error::from_answer(&name, message)
            }
            other => Error::Bus(other),
        }
    }
}

fn fdo_name(e: &zbus::fdo::Error) -> String {
    use zbus::DBusError;
    e.name().to_string()
}

/// The result of a client call.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_name_round_trips() {
        for name in [
            "org.vgpud1.Error.InvalidArgument",
            "org.vgpud1.Error.NotFound",
            "org.vgpud1.Error.NoCapacity",
            "org.vgpud1.Error.Exists",
            "org.vgpud1.Error.Busy",
            "org.vgpud1.Error.NotSupported",
            "org.vgpud1.Error.NeedsReset",
            "org.vgpud1.Error.Unsafe",
            "org.vgpud1.Error.Failed",
            "org.vgpud1.Error.Libvirt",
            "org.vgpud1.Error.LibvirtUnavailable",
            "org.freedesktop.DBus.Error.AccessDenied",
            "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired",
            "org.freedesktop.DBus.Error.ServiceUnknown",
            "com.example.Other",
        ] {
            let e = Error::from_answer(name, "why".into());
            assert_eq!(e.name(), name);
            assert_eq!(e.message(), "why");
        }
    }

    #[test]
    fn classes_follow_what_a_retry_can_change() {
        let class = |n: &str| Error::from_answer(n, String::new()).class();
        assert_eq!(class("org.vgpud1.Error.NoCapacity"), ErrorClass::Conflict);
        assert_eq!(class("org.vgpud1.Error.InvalidArgument"), ErrorClass::Usage);
        assert_eq!(
            class("org.freedesktop.DBus.Error.AccessDenied"),
            ErrorClass::Denied
        );
        assert_eq!(
            class("org.freedesktop.DBus.Error.ServiceUnknown"),
            ErrorClass::Unreachable
        );
        assert_eq!(class("org.vgpud1.Error.Failed"), ErrorClass::Host);
        assert_eq!(
            class("org.freedesktop.DBus.Error.LimitsExceeded"),
            ErrorClass::Conflict
        );
        assert_eq!(class("org.vgpud1.Error.Busy"), ErrorClass::Conflict);
    }
}
