//! Bottlerocket: the typed subset of its settings that accelready writes, and
//! the validation rules Bottlerocket and kubelet apply to them.

pub mod userdata;
