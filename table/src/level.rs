//! Config levels: where limits are set (system, resource, entity x resource),
//! and the order in which the client resolves them for a bucket.

/// The entity-wide resource of an entity level.
pub const DEFAULT_RESOURCE: &str = "_default_";

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    System,
    Resource(String),
    Entity { entity: String, resource: String },
}

impl Level {
    /// `system`, `resource` or `entity`, as the protocols and pending items name them.
    pub fn kind(&self) -> &'static str {
        match self {
            Level::System => "system",
            Level::Resource(_) => "resource",
            Level::Entity { .. } => "entity",
        }
    }

    /// `None` for the system level, `<resource>` or `<entity>/<resource>`.
    pub fn target(&self) -> Option<String> {
        match self {
            Level::System => None,
            Level::Resource(resource) => Some(resource.clone()),
            Level::Entity { entity, resource } => Some(format!("{entity}/{resource}")),
        }
    }

    /// Reverses [`Level::target`]; entity targets split at the first `/`.
    pub fn from_parts(kind: &str, target: &str) -> Option<Level> {
        match kind {
            "system" => Some(Level::System),
            "resource" => Some(Level::Resource(target.to_owned())),
            "entity" => target
                .split_once('/')
                .map(|(entity, resource)| Level::Entity {
                    entity: entity.to_owned(),
                    resource: resource.to_owned(),
                }),
            _ => None,
        }
    }

    /// `system`, or the kind and target, for messages.
    pub fn describe(&self) -> String {
        match self.target() {
            Some(target) => format!("{} {target}", self.kind()),
            None => "system".into(),
        }
    }

    /// The levels that decide a bucket of (entity, resource), in the
    /// client's resolution order: the entity level, the entity's
    /// `_default_`, the resource, and with `system` the system level.
    pub fn resolution(entity: &str, resource: &str, system: bool) -> Vec<Level> {
        let mut levels = vec![Level::Entity {
            entity: entity.into(),
            resource: resource.into(),
        }];
        if resource != DEFAULT_RESOURCE {
            levels.push(Level::Entity {
                entity: entity.into(),
                resource: DEFAULT_RESOURCE.into(),
            });
            levels.push(Level::Resource(resource.into()));
        }
        if system {
            levels.push(Level::System);
        }
        levels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_round_trip_and_entity_targets_split_at_the_first_slash() {
        for level in [
            Level::System,
            Level::Resource("openai/gpt-4".into()),
            Level::Entity {
                entity: "u1".into(),
                resource: "a/b".into(),
            },
        ] {
            let target = level.target().unwrap_or_default();
            assert_eq!(Level::from_parts(level.kind(), &target), Some(level));
        }
        assert_eq!(Level::from_parts("tenant", "x"), None);
    }
}
