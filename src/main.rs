//! The vgpud daemon binary.
fn main() {}
