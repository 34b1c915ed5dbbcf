//! The `Custom::ZaeLimiterLimits` provisioner for zae-limiter 0.17.0 tables:
//! a limits manifest ([`manifest`]) applied as config items the client
//! reads ([`config`]), with the bucket fan-outs ([`fanout`]) that carry each
//! change to buckets that already exist, behind one pipeline ([`apply`])
//! that CloudFormation ([`cfn`]), the direct invoke ([`invoke`]) and the
//! `zae-limits` CLI share. Nothing here but [`dynamo`] and the response PUT
//! touches the network.

pub mod apply;
pub mod audit;
pub mod cfn;
pub mod cli;
pub mod cfn_props;
pub mod config;
pub mod dynamo;
pub mod expr;
pub mod fanout;
pub mod gate;
pub mod invoke;
pub mod lambda;
pub mod manifest;
pub mod names;
pub mod path;
pub mod pending;
pub mod schedule;
pub mod state;
pub mod store;
