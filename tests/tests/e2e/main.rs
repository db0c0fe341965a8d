//! End-to-end tests over real TCP, in one test binary (one link, shared helpers).

mod client;
mod faults;
mod hardening;
mod limits;
mod shutdown;
mod wire;
