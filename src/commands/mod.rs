//! The commands: one module per subcommand, each translating its clap
//! arguments ([`crate::cli`]) into the plain request the domain module takes,
//! calling it, and printing the result. The only place besides `cli` and
//! `lib` that knows about flags: domain modules never import [`crate::cli`].

pub mod boot;
pub mod check;
pub mod diagnose;
pub mod hostengine;
pub mod provision;
pub mod render;
