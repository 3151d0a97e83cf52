//! `accelready diagnose`: forecast what Karpenter node repair will do to
//! nodes, when, and why, from `kubectl get node(s) -o json`.
//!
//! - [`model`]: Karpenter's repair policies and behaviour by version (data);
//! - [`agent`]: the EKS node monitoring agent's DCGM client by version (data);
//! - [`kube`]: the kubectl JSON, parsed into minimal types as it streams
//!   (`scan` cuts it into pieces: the top-level members and each item);
//! - [`placement`]: whether a DaemonSet (the chart's `dcgm-server`) lands on a node;
//! - [`forecast`]: the pure forecast;
//! - [`advice`]: cause and fix texts keyed on the condition (data);
//! - `text`: the forecast rendered for a person.

pub mod advice;
pub mod agent;
pub mod forecast;
pub mod kube;
pub mod model;
pub mod placement;
mod scan;
mod text;

pub use forecast::{forecast, Forecast, Options, Verdict};
