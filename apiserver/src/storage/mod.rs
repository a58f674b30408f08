//! Storage: the etcd v3 client everything is stored through, and the value transformation
//! (encryption at rest) applied at its boundary.

pub mod etcd3;
pub mod value;
