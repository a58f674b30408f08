//! HTTP serving shared by every component: the connection loop (HTTP/1.1 and
//! HTTP/2 on one port, TLS optional) and the `/metrics` and health endpoints.

mod authority_fixup;
mod connection;
mod endpoints;
mod server;

pub use connection::ConnectionInfo;
pub use endpoints::{Endpoints, EndpointsService, HealthFormat};
pub use server::{SecureServing, ServeOptions, serve};

#[cfg(test)]
mod tests;
