//! Storage: the etcd v3 client everything is stored through.

pub mod etcd3;
