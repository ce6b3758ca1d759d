//! The one integration-test binary (every test binary links libtorch, so there is only one).
//! One module per area.

mod cli;
mod look_inside;
mod util;
mod loader;
mod malformed;
