//! Where in a manifest a value sits, so every error can name it exactly, in
//! the spelling of whichever entrance the manifest came through.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    /// A schema field; rendered snake_case (YAML) or PascalCase (CloudFormation).
    Field(&'static str),
    /// A user-chosen map key: a resource, entity or limit name.
    Key(String),
    Index(usize),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Path(Vec<Seg>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    Yaml,
    CloudFormation,
}

impl Path {
    pub fn root() -> Path {
        Path(Vec::new())
    }
    pub fn field(&self, name: &'static str) -> Path {
        self.with(Seg::Field(name))
    }
    pub fn key(&self, name: &str) -> Path {
        self.with(Seg::Key(name.to_owned()))
    }
    pub fn index(&self, i: usize) -> Path {
        self.with(Seg::Index(i))
    }
    fn with(&self, seg: Seg) -> Path {
        let mut segs = self.0.clone();
        segs.push(seg);
        Path(segs)
    }

    pub fn render(&self, spelling: Spelling) -> String {
        let mut out = String::new();
        for seg in &self.0 {
            match seg {
                Seg::Index(i) => out.push_str(&format!("[{i}]")),
                Seg::Field(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    match spelling {
                        Spelling::Yaml => out.push_str(name),
                        Spelling::CloudFormation => out.push_str(&pascal(name)),
                    }
                }
                Seg::Key(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                }
            }
        }
        out
    }
}

/// `refill_period_seconds` → `RefillPeriodSeconds`, `tz` → `Tz`: the property
/// names the CloudFormation form uses for every manifest field.
pub fn pascal(snake: &str) -> String {
    snake
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(Spelling::Yaml))
    }
}

/// One thing wrong with a manifest, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: Path,
    pub message: String,
}

impl Problem {
    pub fn new(path: &Path, message: impl Into<String>) -> Problem {
        Problem {
            path: path.clone(),
            message: message.into(),
        }
    }
    pub fn render(&self, spelling: Spelling) -> String {
        let path = self.path.render(spelling);
        if path.is_empty() {
            self.message.clone()
        } else {
            format!("{path}: {}", self.message)
        }
    }
}

/// Every problem found in one manifest; nothing is written while there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Invalid {
    pub problems: Vec<Problem>,
    pub spelling: Spelling,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self
            .problems
            .iter()
            .map(|p| p.render(self.spelling))
            .collect();
        write!(f, "invalid limits manifest: {}", lines.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_in_either_spelling() {
        let path = Path::root()
            .field("entities")
            .key("u1")
            .field("resources")
            .key("gpt-4")
            .field("limits")
            .key("tpm")
            .field("reset_schedule")
            .index(2)
            .field("refill_period_seconds");
        assert_eq!(
            path.render(Spelling::Yaml),
            "entities.u1.resources.gpt-4.limits.tpm.reset_schedule[2].refill_period_seconds"
        );
        assert_eq!(
            path.render(Spelling::CloudFormation),
            "Entities.u1.Resources.gpt-4.Limits.tpm.ResetSchedule[2].RefillPeriodSeconds"
        );
    }
}
