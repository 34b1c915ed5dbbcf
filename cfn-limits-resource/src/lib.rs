//! `Custom::ZaeLimiterLimits`: the limits provisioner. Planned; nothing is built here yet.
