//! Entity items (`{ns}/ENTITY#{id}`, `#META`): the attributes the cascade
//! fan-out reads.

pub const PARENT_ID: &str = "parent_id";
/// Bumped each time the client moves the entity's parent.
pub const PARENT_GENERATION: &str = "pgen";
/// Which incarnation of the entity id: `pinc`, or else its `created_at`.
pub const INCARNATION: &str = "pinc";
pub const CREATED_AT: &str = "created_at";
/// The entity's own cascade default.
pub const CASCADE: &str = "cascade";
