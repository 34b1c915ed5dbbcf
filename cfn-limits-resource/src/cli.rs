//! What `zae-limits` prints: plan, apply and diff reports in the Python
//! CLI's wording, and the tenant stack of `cfn-template`.

use crate::apply::{ChangeLine, Report};
use crate::manifest::{Disabled, LevelDecl, LimitDecl, Manifest};
use crate::path::pascal;
use crate::schedule::ScheduleEntry;
use serde_norway::{Mapping, Value as Tree};

fn symbol(action: &str) -> char {
    match action {
        "create" => '+',
        "delete" => '-',
        _ => '~',
    }
}

fn line(change: &ChangeLine) -> String {
    let target = change
        .target
        .clone()
        .unwrap_or_else(|| "(system defaults)".into());
    format!(
        "  {} {} {}: {target}",
        symbol(change.action),
        change.action,
        change.level
    )
}

fn pending_note(pending: usize) -> String {
    format!("{pending} bucket fan-out(s) an earlier apply did not finish will be retried by the next apply.")
}

pub fn render_plan(report: &Report, quiet: bool) -> String {
    if report.changes.is_empty() {
        return if report.pending > 0 {
            format!("No config changes; {}", pending_note(report.pending))
        } else {
            "No changes. Infrastructure is up-to-date.".into()
        };
    }
    let mut out = format!("Plan: {} change(s)", report.changes.len());
    if report.unchanged > 0 {
        out.push_str(&format!(" ({} unchanged)", report.unchanged));
    }
    if report.pending > 0 {
        out.push_str(&format!("\nNote: {}", pending_note(report.pending)));
    }
    if !quiet {
        for change in &report.changes {
            out.push('\n');
            out.push_str(&line(change));
        }
    }
    out
}

pub fn render_diff(report: &Report) -> String {
    if report.changes.is_empty() {
        return "No drift detected. Live state matches YAML.".into();
    }
    let mut out = format!("Drift detected: {} difference(s)", report.changes.len());
    for change in &report.changes {
        let target = change.target.clone().unwrap_or_else(|| "(system defaults)".into());
        out.push_str(&format!("\n  {} {}: {target}", symbol(change.action), change.level));
    }
    out
}

pub fn render_apply(report: &Report, quiet: bool) -> String {
    let mut out = String::new();
    if !quiet {
        for change in &report.changes {
            out.push_str(&line(change));
            out.push('\n');
        }
    }
    out.push_str(&format!(
        "Applied: {} created, {} updated, {} deleted",
        report.created.unwrap_or(0),
        report.updated.unwrap_or(0),
        report.deleted.unwrap_or(0)
    ));
    if report.unchanged > 0 {
        out.push_str(&format!(" ({} unchanged)", report.unchanged));
    }
    out.push('.');
    if report.pending > 0 {
        out.push_str(&format!("\nNote: {}", pending_note(report.pending)));
    }
    if report.resumed {
        out.push_str(
            "\nNote: resumed the fan-outs an earlier full apply did not finish, instead of starting over.",
        );
    }
    out
}

fn key(name: &str) -> Tree {
    Tree::String(name.to_owned())
}

fn entry_props(entry: &ScheduleEntry, reset: bool) -> Tree {
    let mut map = Mapping::new();
    map.insert(key("Cron"), key(&entry.cron));
    map.insert(key("Tz"), key(&entry.tz));
    if !reset {
        if let Some(scale) = entry.scale {
            map.insert(key("Scale"), Tree::Number(scale.into()));
        }
        for (name, value) in [
            ("capacity", entry.capacity),
            ("refill_amount", entry.refill_amount),
            ("refill_period_seconds", entry.refill_period_seconds),
        ] {
            if let Some(value) = value {
                map.insert(key(&pascal(name)), Tree::Number(value.into()));
            }
        }
    }
    Tree::Mapping(map)
}

fn limit_props(limit: &LimitDecl) -> Tree {
    let mut map = Mapping::new();
    map.insert(key("Capacity"), Tree::Number(limit.capacity.into()));
    map.insert(key("RefillAmount"), Tree::Number(limit.refill_amount.into()));
    map.insert(key("RefillPeriod"), Tree::Number(limit.refill_period.into()));
    if let Some(seconds) = limit.reset_after_seconds {
        map.insert(key("ResetAfterSeconds"), Tree::Number(seconds.into()));
    }
    if limit.soft {
        map.insert(key("Soft"), Tree::Bool(true));
    }
    if !limit.schedule.is_empty() {
        let entries = limit.schedule.iter().map(|e| entry_props(e, false)).collect();
        map.insert(key("Schedule"), Tree::Sequence(entries));
    }
    if !limit.reset_schedule.is_empty() {
        let entries = limit.reset_schedule.iter().map(|e| entry_props(e, true)).collect();
        map.insert(key("ResetSchedule"), Tree::Sequence(entries));
    }
    Tree::Mapping(map)
}

fn level_props(level: &LevelDecl) -> Tree {
    let mut map = Mapping::new();
    if let Some(on_unavailable) = &level.on_unavailable {
        map.insert(key("OnUnavailable"), key(on_unavailable));
    }
    match level.disabled {
        Some(Disabled::Yes) => map.insert(key("Disabled"), Tree::Bool(true)),
        Some(Disabled::No) => map.insert(key("Disabled"), Tree::Bool(false)),
        Some(Disabled::Bypass) => map.insert(key("Disabled"), key("bypass")),
        None => None,
    };
    if let Some(cascade) = level.cascade {
        map.insert(key("Cascade"), Tree::Bool(cascade));
    }
    let limits: Mapping = level
        .limits
        .iter()
        .map(|(name, limit)| (key(name), limit_props(limit)))
        .collect();
    map.insert(key("Limits"), Tree::Mapping(limits));
    Tree::Mapping(map)
}

/// A tenant stack holding one `Custom::ZaeLimiterLimits` resource whose
/// ServiceToken imports `<stack>-ProvisionerArn`.
pub fn cfn_template(manifest: &Manifest, stack: &str, full: bool) -> String {
    let mut props = Mapping::new();
    props.insert(
        key("ServiceToken"),
        Tree::Mapping(Mapping::from_iter([(
            key("Fn::ImportValue"),
            key(&format!("{stack}-ProvisionerArn")),
        )])),
    );
    // Long enough for a large first apply, far below CloudFormation's one-hour default.
    props.insert(key("ServiceTimeout"), Tree::Number(900.into()));
    props.insert(key("TableName"), key(stack));
    props.insert(key("Namespace"), key(&manifest.namespace));
    if full {
        props.insert(key("FullApply"), Tree::Bool(true));
    }
    if let Some(system) = &manifest.system {
        props.insert(key("System"), level_props(system));
    }
    if !manifest.resources.is_empty() {
        let resources: Mapping = manifest
            .resources
            .iter()
            .map(|(name, level)| (key(name), level_props(level)))
            .collect();
        props.insert(key("Resources"), Tree::Mapping(resources));
    }
    if !manifest.entities.is_empty() {
        let entities: Mapping = manifest
            .entities
            .iter()
            .map(|(entity, resources)| {
                let resources: Mapping = resources
                    .iter()
                    .map(|(name, level)| (key(name), level_props(level)))
                    .collect();
                (
                    key(entity),
                    Tree::Mapping(Mapping::from_iter([(key("Resources"), Tree::Mapping(resources))])),
                )
            })
            .collect();
        props.insert(key("Entities"), Tree::Mapping(entities));
    }
    let mut resource = Mapping::new();
    resource.insert(key("Type"), key("Custom::ZaeLimiterLimits"));
    resource.insert(key("Properties"), Tree::Mapping(props));
    let mut template = Mapping::new();
    template.insert(key("AWSTemplateFormatVersion"), key("2010-09-09"));
    template.insert(
        key("Description"),
        key(&format!("Declarative limits for namespace '{}'", manifest.namespace)),
    );
    template.insert(
        key("Resources"),
        Tree::Mapping(Mapping::from_iter([(key("TenantLimits"), Tree::Mapping(resource))])),
    );
    serde_norway::to_string(&Tree::Mapping(template)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cfn_props;
    use crate::path::Spelling;

    #[test]
    fn a_printed_template_round_trips_through_the_property_coercion() {
        let manifest = Manifest::from_yaml(
            r#"
namespace: tenant-alpha
system: {on_unavailable: block, limits: {rpm: {capacity: 10000}}}
resources:
  gpt-4:
    cascade: true
    disabled: bypass
    limits:
      tpm: {capacity: 50000, soft: true, schedule: [{cron: "* 9-17 * * 1-5", tz: Europe/Berlin, scale: 0.5}]}
      day: {capacity: 100, reset_schedule: [{cron: "0 0 * * *", tz: Europe/Berlin}]}
entities:
  user-1: {resources: {_default_: {disabled: false}, gpt-4: {limits: {s: {capacity: 5, reset_after_seconds: 60}}}}}
"#,
        )
        .unwrap();
        let text = cfn_template(&manifest, "rate-limits", true);
        let template: Tree = serde_norway::from_str(&text).unwrap();
        let props = &template["Resources"]["TenantLimits"]["Properties"];
        assert_eq!(props["ServiceToken"]["Fn::ImportValue"], key("rate-limits-ProvisionerArn"));
        assert_eq!(props["FullApply"], Tree::Bool(true));
        let tree = cfn_props::to_manifest_tree(props, "tenant-alpha").unwrap();
        assert_eq!(Manifest::parse(&tree, Spelling::CloudFormation).unwrap(), manifest);
    }

    #[test]
    fn reports_read_like_the_python_cli() {
        let report = Report {
            status: "planned",
            changes: vec![
                ChangeLine {
                    action: "create",
                    level: "system",
                    target: None,
                },
                ChangeLine {
                    action: "delete",
                    level: "entity",
                    target: Some("u1/gpt-4".into()),
                },
            ],
            unchanged: 3,
            ..Report::default()
        };
        assert_eq!(
            render_plan(&report, false),
            "Plan: 2 change(s) (3 unchanged)\n  + create system: (system defaults)\n  - delete entity: u1/gpt-4"
        );
        assert_eq!(
            render_plan(&Report::default(), false),
            "No changes. Infrastructure is up-to-date."
        );
    }
}
