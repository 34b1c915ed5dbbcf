//! What a failed `zae-limits` run says, and the exit code it leaves: one
//! kind per cause (`args::EXIT_CODES`), as text on stderr or, under
//! `--json`, as one JSON object on stdout.

use serde::Serialize;
use serde_json::{Value, json};
use zae_provisioner::apply::ApplyError;
use zae_provisioner::apply::gate::GateError;
use zae_provisioner::manifest::problem::{Invalid, Spelling};
use zae_table::store::StoreError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    ApplyErrors,
    Drift,
    InvalidInput,
    Aws,
    Refused,
    /// An apply stopped at `--max-seconds` with fan-outs left to run.
    Unfinished,
    Usage,
}

impl Kind {
    pub fn code(self) -> u8 {
        match self {
            Kind::ApplyErrors => 1,
            Kind::Drift => 2,
            Kind::InvalidInput => 3,
            Kind::Aws => 4,
            Kind::Refused => 5,
            Kind::Unfinished => 6,
            Kind::Usage => 64,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CliError {
    pub kind: Kind,
    pub message: String,
    /// Each problem of an invalid manifest, at its path.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<PathProblem>,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathProblem {
    pub path: String,
    pub message: String,
}

impl CliError {
    pub fn new(kind: Kind, message: impl Into<String>) -> CliError {
        CliError {
            kind,
            message: message.into(),
            problems: Vec::new(),
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> CliError {
        self.hint = Some(hint.into());
        self
    }

    /// A manifest that does not validate: every problem at its path.
    pub fn invalid(file: &std::path::Path, invalid: &Invalid) -> CliError {
        let problems = invalid
            .problems
            .iter()
            .map(|p| PathProblem {
                path: p.path.render(Spelling::Yaml),
                message: p.message.clone(),
            })
            .collect();
        CliError {
            problems,
            ..CliError::new(
                Kind::InvalidInput,
                format!("{}: invalid limits manifest", file.display()),
            )
        }
    }

    /// A failed AWS call, with what it was doing.
    pub fn aws(doing: &str, err: &StoreError) -> CliError {
        let error = CliError::new(Kind::Aws, format!("{doing}: {err}"));
        match err {
            StoreError::TableMissing { .. } => error.with_hint(
                "check --name/--table and --region (and --endpoint-url for a local table)",
            ),
            _ => error,
        }
    }

    pub fn json(&self) -> Value {
        let mut fields = serde_fields(self);
        fields.insert("exit_code".into(), json!(self.kind.code()));
        json!({ "error": fields })
    }

    pub fn text(&self) -> String {
        let mut out = format!("Error: {}", self.message);
        for p in &self.problems {
            out.push_str(&format!("\n  - {}: {}", p.path, p.message));
        }
        if let Some(hint) = &self.hint {
            out.push_str(&format!("\nHint: {hint}"));
        }
        out
    }
}

fn serde_fields(error: &CliError) -> serde_json::Map<String, Value> {
    match serde_json::to_value(error) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}

impl From<ApplyError> for CliError {
    fn from(err: ApplyError) -> CliError {
        let message = err.to_string();
        match err {
            ApplyError::Gate(GateError::Behind { .. }) => CliError::new(Kind::Refused, message)
                .with_hint("deploy this project's stack (its TableInit stamps the version record), or run `zae-limits init`"),
            ApplyError::Owned { .. }
            | ApplyError::OwnedAfter { .. }
            | ApplyError::OwnerMoved { .. }
            | ApplyError::RecordMoved { .. }
            | ApplyError::Purging { .. } => CliError::new(Kind::Refused, message),
            ApplyError::OwnerMovedAfter { .. } | ApplyError::RecordMovedAfter { .. } => {
                CliError::new(Kind::ApplyErrors, message)
            }
            ApplyError::Gate(_) | ApplyError::Store { .. } => CliError::new(Kind::Aws, message),
            ApplyError::OutOfTime { .. } => CliError::new(Kind::ApplyErrors, message),
        }
    }
}
