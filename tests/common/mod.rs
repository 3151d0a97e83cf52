//! Helpers shared by the integration tests.

#![allow(dead_code)]

pub mod bundle;
pub mod elf;
pub mod https;
