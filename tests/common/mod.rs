//! Helpers shared by the integration tests.

#![allow(dead_code)]

pub mod api;
pub mod bundle;
pub mod elf;
pub mod fake_dcgm;
pub mod host;
pub mod https;
pub mod nodes;
pub mod sandbox;
pub mod timed;
