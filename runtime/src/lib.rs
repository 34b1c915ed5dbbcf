//! What both Lambdas need from their runtime that is no part of the table
//! model: JSON logs on stderr ([`telemetry`]) and the time left in an
//! invocation ([`deadline`]).

pub mod deadline;
pub mod telemetry;
