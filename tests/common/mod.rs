#![allow(dead_code)]
pub mod golden;
