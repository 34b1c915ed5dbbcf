//! What a plan says it will do: the action on a level or on the adaptive
//! declaration, and the one line each change prints.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Create,
    Update,
    Delete,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
        }
    }
}

/// One change as `plan`, `diff` and `apply` print it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChangeLine {
    pub action: &'static str,
    pub level: &'static str,
    pub target: Option<String>,
}
