//! Bottlerocket: the typed subset of its settings that accelready writes (with
//! the validation rules Bottlerocket and kubelet apply to them), and its API.

pub mod api;
pub mod userdata;
