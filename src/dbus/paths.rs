//! Object paths of the `org.vgpud1` objects: the client library's, so the daemon and its
//! clients escape alike.

pub use vgpud_client::paths::*;
