//! `accelready diagnose`: forecast what Karpenter node repair will do to
//! nodes, when, and why, from `kubectl get node(s) -o json`.
//!
//! - [`model`]: Karpenter's repair policies and behaviour by version (data);
//! - [`kube`]: the kubectl JSON, parsed into minimal types as it streams
//!   (`scan` cuts it into pieces: the top-level members and each item);
//! - [`forecast`]: the pure forecast;
//! - [`advice`]: cause and fix texts keyed on the condition (data);
//! - `text`: the forecast rendered for a person.

pub mod advice;
pub mod forecast;
pub mod kube;
pub mod model;
mod scan;
mod text;

pub use forecast::{forecast, Forecast, Options, Verdict};
