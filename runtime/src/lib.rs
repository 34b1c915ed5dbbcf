//! What both Lambdas need from their runtime that is no part of the table
//! model: JSON logs on stderr ([`telemetry`]), the time left in an
//! invocation ([`deadline`]), and SDK configuration whose every request is
//! bounded in time ([`aws`]), the table arguments of the command
//! lines ([`cli`], feature `cli`), and which build this is ([`version`]).

pub mod aws;
#[cfg(feature = "cli")]
pub mod cli;
pub mod deadline;
pub mod telemetry;
pub mod version;
