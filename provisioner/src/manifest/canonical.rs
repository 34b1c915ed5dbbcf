//! The manifest's canonical form, keys sorted, and the `applied_hash` over
//! it that the `#PROVISIONER` record keeps: computed as the 0.17.0
//! provisioner computes it, so both agree on the same manifest.

use super::{Disabled, LevelDecl, LimitDecl, Manifest};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use zae_table::schedule::ScheduleEntry;

impl Manifest {
    /// The canonical JSON form, keys sorted, for the informational
    /// `applied_hash` of the state record.
    pub fn canonical(&self) -> serde_json::Value {
        let mut root = Map::new();
        root.insert("namespace".into(), json!(self.namespace));
        if let Some(system) = &self.system {
            root.insert("system".into(), level_canonical(system, true));
        }
        if !self.resources.is_empty() {
            let resources: Map<String, Value> = self
                .resources
                .iter()
                .map(|(name, decl)| (name.clone(), level_canonical(decl, false)))
                .collect();
            root.insert("resources".into(), Value::Object(resources));
        }
        if !self.entities.is_empty() {
            let entities: Map<String, Value> = self
                .entities
                .iter()
                .map(|(entity, resources)| {
                    let resources: Map<String, Value> = resources
                        .iter()
                        .map(|(name, decl)| (name.clone(), level_canonical(decl, false)))
                        .collect();
                    (entity.clone(), json!({ "resources": resources }))
                })
                .collect();
            root.insert("entities".into(), Value::Object(entities));
        }
        Value::Object(root)
    }

    /// `sha256:<hex>` over the canonical form, serialised the way Python's
    /// `json.dumps(sort_keys=True)` does, so both provisioners agree.
    pub fn applied_hash(&self) -> String {
        let text = python_json(&self.canonical());
        let digest = Sha256::digest(text.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }
}

fn level_canonical(decl: &LevelDecl, system: bool) -> serde_json::Value {
    let limits: Map<String, Value> = decl
        .limits
        .iter()
        .map(|(name, limit)| (name.clone(), limit_canonical(limit)))
        .collect();
    let mut out = Map::new();
    out.insert("limits".into(), Value::Object(limits));
    if system {
        if let Some(on_unavailable) = &decl.on_unavailable {
            out.insert("on_unavailable".into(), json!(on_unavailable));
        }
    } else {
        match decl.disabled {
            Some(Disabled::Yes) => out.insert("disabled".into(), json!(true)),
            Some(Disabled::No) => out.insert("disabled".into(), json!(false)),
            Some(Disabled::Bypass) => out.insert("disabled".into(), json!("bypass")),
            None => None,
        };
        if let Some(cascade) = decl.cascade {
            out.insert("cascade".into(), json!(cascade));
        }
        // Only where declared, so a manifest without it hashes as the
        // reference provisioner hashes it.
        if !decl.estimated_capacity.is_empty() {
            let capacity: Map<String, Value> = decl
                .estimated_capacity
                .iter()
                .map(|(limit, tpm)| (limit.clone(), json!(tpm)))
                .collect();
            out.insert("estimated_capacity".into(), Value::Object(capacity));
        }
        if !decl.target_utilization.is_empty() {
            let target: Map<String, Value> = decl
                .target_utilization
                .iter()
                .map(|(limit, ppm)| (limit.clone(), json!(ppm)))
                .collect();
            out.insert("target_utilization_ppm".into(), Value::Object(target));
        }
        // `share: base` is the default and hashes as no share at all.
        if decl.share_demand {
            out.insert("share".into(), json!("demand"));
        }
    }
    Value::Object(out)
}

fn limit_canonical(limit: &LimitDecl) -> serde_json::Value {
    let mut out = json!({
        "capacity": limit.capacity,
        "refill_amount": limit.refill_amount,
        "refill_period": limit.refill_period,
    });
    let map = out.as_object_mut().expect("built as an object");
    let entries = |entries: &[ScheduleEntry]| -> Value {
        Value::Array(entries.iter().map(entry_canonical).collect())
    };
    if !limit.schedule.is_empty() {
        map.insert("schedule".into(), entries(&limit.schedule));
    }
    if !limit.reset_schedule.is_empty() {
        map.insert("reset_schedule".into(), entries(&limit.reset_schedule));
    }
    if let Some(seconds) = limit.reset_after_seconds {
        map.insert("reset_after_seconds".into(), json!(seconds));
    }
    if limit.soft {
        map.insert("soft".into(), json!(true));
    }
    if let Some(adaptive) = limit.adaptive {
        map.insert("adaptive".into(), json!(adaptive.mode()));
        if let Some(scale) = adaptive.max_scale {
            map.insert("max_scale_ppm".into(), json!(scale.ppm()));
        }
    }
    out
}

/// JSON with Python's default separators (`", "`, `": "`) and ASCII escapes.
fn python_json(value: &serde_json::Value) -> String {
    fn string(out: &mut String, text: &str) {
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{08}' => out.push_str("\\b"),
                '\u{0c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
    fn walk(out: &mut String, value: &Value) {
        match value {
            Value::Object(map) => {
                out.push('{');
                // Sorted here: serde_json keeps insertion order when any crate
                // in the build turns on its `preserve_order` feature.
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    string(out, key);
                    out.push_str(": ");
                    walk(out, item);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    walk(out, item);
                }
                out.push(']');
            }
            Value::String(text) => string(out, text),
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    walk(&mut out, value);
    out
}

/// A schedule entry's canonical form.
fn entry_canonical(entry: &ScheduleEntry) -> Value {
    let mut out = json!({ "cron": entry.cron, "tz": entry.tz });
    let map = out.as_object_mut().expect("built as an object");
    if let Some(scale) = entry.scale {
        map.insert("scale".into(), json!(scale));
    }
    for (name, value) in [
        ("capacity", entry.capacity),
        ("refill_amount", entry.refill_amount),
        ("refill_period_seconds", entry.refill_period_seconds),
    ] {
        if let Some(value) = value {
            map.insert(name.into(), json!(value));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_applied_hash_matches_the_reference_provisioners() {
        // The value the 0.17.0 provisioner computes for the same manifest.
        let manifest = Manifest::from_yaml(
            r#"namespace: tenant-é
system: {on_unavailable: allow, limits: {rpm: {capacity: 10000}}}
resources:
  gpt-4: {cascade: true, disabled: bypass, limits: {tpm: {capacity: 50000, soft: true, schedule: [{cron: "* 9-17 * * 1-5", tz: UTC, scale: 0.5}]}}}
entities:
  user-1: {resources: {_default_: {disabled: false}, gpt-4: {limits: {d: {capacity: 100, reset_schedule: [{cron: "0 0 * * *", tz: UTC}]}, s: {capacity: 5, reset_after_seconds: 60}}}}}
"#,
        )
        .unwrap();
        assert_eq!(
            manifest.applied_hash(),
            "sha256:f5e6ce46f6630c81c606fb7393d858c806c938caabcb38a3d42984e7daa297d3"
        );
    }

    #[test]
    fn a_target_utilization_of_one_hashes_as_none_and_others_and_shadow_change_the_hash() {
        let hash = |extra: &str, mode: &str| {
            Manifest::from_yaml(&format!(
                "namespace: n\nresources: {{r: {{estimated_capacity: {{tpm: 1000}}, {extra} \
                 limits: {{tpm: {{capacity: 100, refill_amount: 10, adaptive: {mode}}}}}}}}}\n"
            ))
            .unwrap()
            .applied_hash()
        };
        let plain = hash("", "utilization");
        assert_eq!(hash("target_utilization: {tpm: 1},", "utilization"), plain);
        assert_ne!(
            hash("target_utilization: {tpm: 0.8},", "utilization"),
            plain
        );
        assert_ne!(hash("", "shadow"), plain);
        assert_eq!(hash("share: base,", "utilization"), plain);
        assert_ne!(hash("share: demand,", "utilization"), plain);
    }
}
