//! dbus
