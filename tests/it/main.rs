//! The one integration-test binary (every test binary links libtorch, so there is only one).
//! One module per area.

mod cli;
mod translate;
mod loader;
mod model;
mod malformed;
mod text;
mod util;
mod verify;
