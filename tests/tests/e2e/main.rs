//! End-to-end tests over real TCP, in one test binary (one link, shared helpers).

mod acl;
mod admin;
mod answers;
mod client;
mod delayed;
mod faults;
mod format;
mod fuzz;
mod hardening;
mod kafka;
mod kafka_apis;
mod limits;
mod native_security;
mod power_loss;
mod quotas;
mod sasl;
mod shutdown;
mod transactions;
mod wire;
