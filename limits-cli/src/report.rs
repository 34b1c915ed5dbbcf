//! What `zae-limits` prints: plan, apply and diff reports in the Python
//! CLI's wording.

use zae_provisioner::apply::{ChangeLine, Report};

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
    format!(
        "{pending} bucket fan-out(s) an earlier apply did not finish will be retried by the next apply."
    )
}

/// The report's notes, each on a line of its own.
fn notes(report: &Report) -> String {
    report
        .notes
        .iter()
        .map(|note| format!("\nNote: {note}"))
        .collect()
}

pub fn render_plan(report: &Report, quiet: bool) -> String {
    if report.changes.is_empty() {
        let head = if report.pending > 0 {
            format!("No config changes; {}", pending_note(report.pending))
        } else {
            "No changes. Infrastructure is up-to-date.".into()
        };
        return head + &notes(report);
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
    out + &notes(report)
}

pub fn render_diff(report: &Report) -> String {
    if report.changes.is_empty() {
        return "No drift detected. Live state matches YAML.".into();
    }
    let mut out = format!("Drift detected: {} difference(s)", report.changes.len());
    for change in &report.changes {
        let target = change
            .target
            .clone()
            .unwrap_or_else(|| "(system defaults)".into());
        out.push_str(&format!(
            "\n  {} {}: {target}",
            symbol(change.action),
            change.level
        ));
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
    out + &notes(report)
}

#[cfg(test)]
mod tests {
    use super::*;

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
