//! Bottlerocket: its settings model (user-data) and its API.

pub mod api;
