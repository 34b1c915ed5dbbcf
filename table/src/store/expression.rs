//! Update expressions with every attribute name behind an alias: limit
//! names hold `-./:`, and `ttl`, `cascade` or `level` are DynamoDB reserved
//! words.

use super::Update;
use crate::value::Attr;
use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub struct UpdateBuilder {
    sets: Vec<String>,
    adds: Vec<String>,
    removes: Vec<String>,
    names: BTreeMap<String, String>,
    aliases: BTreeMap<String, String>,
    values: BTreeMap<String, Attr>,
}

impl UpdateBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// The alias of an attribute name, made once per name.
    pub fn name(&mut self, attr: &str) -> String {
        if let Some(alias) = self.aliases.get(attr) {
            return alias.clone();
        }
        let alias = format!("#n{}", self.aliases.len());
        self.aliases.insert(attr.to_owned(), alias.clone());
        self.names.insert(alias.clone(), attr.to_owned());
        alias
    }

    pub fn value(&mut self, value: Attr) -> String {
        let placeholder = format!(":v{}", self.values.len());
        self.values.insert(placeholder.clone(), value);
        placeholder
    }

    pub fn set(&mut self, attr: &str, value: Attr) -> &mut Self {
        let name = self.name(attr);
        let value = self.value(value);
        self.sets.push(format!("{name} = {value}"));
        self
    }

    /// `SET attr = if_not_exists(attr, value)`: only where there is none.
    pub fn set_if_absent(&mut self, attr: &str, value: Attr) -> &mut Self {
        let name = self.name(attr);
        let value = self.value(value);
        self.sets
            .push(format!("{name} = if_not_exists({name}, {value})"));
        self
    }

    /// `SET attr = if_not_exists(attr, seed) + step`: a counter moved on
    /// by `step`, starting from `seed` where there is none.
    pub fn step_from(&mut self, attr: &str, seed: Attr, step: Attr) -> &mut Self {
        let name = self.name(attr);
        let seed = self.value(seed);
        let step = self.value(step);
        self.sets
            .push(format!("{name} = if_not_exists({name}, {seed}) + {step}"));
        self
    }

    /// `ADD attr value`: a number added to what is there (or to 0).
    pub fn add(&mut self, attr: &str, value: Attr) -> &mut Self {
        let name = self.name(attr);
        let value = self.value(value);
        self.adds.push(format!("{name} {value}"));
        self
    }

    pub fn remove(&mut self, attr: &str) -> &mut Self {
        let name = self.name(attr);
        if !self.removes.contains(&name) {
            self.removes.push(name);
        }
        self
    }

    pub fn build(mut self, pk: &str, sk: &str, condition: Option<String>) -> Update {
        let mut expression = String::new();
        if !self.sets.is_empty() {
            expression = format!("SET {}", self.sets.join(", "));
        }
        for (clause, parts) in [("ADD", &self.adds), ("REMOVE", &self.removes)] {
            if parts.is_empty() {
                continue;
            }
            if !expression.is_empty() {
                expression.push(' ');
            }
            expression.push_str(&format!("{clause} {}", parts.join(", ")));
        }
        // DynamoDB refuses names and values the expressions do not use.
        let text = format!("{expression} {}", condition.as_deref().unwrap_or_default());
        self.names.retain(|alias, _| uses(&text, alias));
        self.values
            .retain(|placeholder, _| uses(&text, placeholder));
        Update {
            pk: pk.to_owned(),
            sk: sk.to_owned(),
            expression,
            condition,
            names: self.names,
            values: self.values,
        }
    }
}

/// Whether `token` occurs in `text` as a whole token (`#n1` is not in `#n10`).
fn uses(text: &str, token: &str) -> bool {
    text.match_indices(token).any(|(at, _)| {
        !text[at + token.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_aliased_once_and_unused_ones_dropped() {
        let mut update = UpdateBuilder::new();
        update
            .set("b_tpm-x_cp", Attr::n(1))
            .remove("ttl")
            .remove("ttl");
        let cascade = update.name("cascade");
        let zero = update.value(Attr::n(0));
        update.name("unused");
        let built = update.build("PK1", "#STATE", Some(format!("{cascade} = {zero}")));
        assert_eq!(built.expression, "SET #n0 = :v0 REMOVE #n1");
        assert_eq!(built.condition.as_deref(), Some("#n2 = :v1"));
        assert_eq!(built.names.len(), 3);
        assert_eq!(built.names["#n1"], "ttl");
        assert!(uses("#n10 = :v1", "#n10") && !uses("#n10", "#n1"));
    }
}
