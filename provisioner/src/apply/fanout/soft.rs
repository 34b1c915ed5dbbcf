//! The `soft` fan-out: a soft limit's deadline stamped, or a hard limit's
//! removed, on the buckets whose limits a system or resource level decides.

use super::{Directive, FanOuts, Tally, deadline};
use crate::apply::now_ms;
use crate::manifest::Level;
use futures::FutureExt;
use std::collections::BTreeSet;
use zae_table::Attr;
use zae_table::bucket::{field, limit_attr};
use zae_table::config::LevelConfig;
use zae_table::resolve::Resolver;
use zae_table::store::{Store, StoreError, UpdateBuilder};

impl<S: Store> FanOuts<'_, S> {
    pub(super) async fn soft(
        &self,
        resolver: &Resolver<'_, S>,
        level: &Level,
        live: Option<&LevelConfig>,
        directive: &Directive,
    ) -> Result<Tally, StoreError> {
        if matches!(level, Level::Entity { .. }) {
            return Ok(Tally::default());
        }
        let mut names: BTreeSet<String> = directive.soft_changed.clone();
        if let Some(live) = live {
            names.extend(live.limits.iter().map(|l| l.name.clone()));
        }
        let names = &names;
        self.each_bucket(level, |key, _| {
            async move {
                let t = now_ms();
                let resolved = resolver.limits(&key.entity, &key.resource, &[]).await?;
                let soft: BTreeSet<String> = match &resolved {
                    // Entity levels carry soft-ness through their own param sync.
                    Some((Level::Entity { .. }, _)) => return Ok(Tally::skipped()),
                    Some((Level::Resource(_), _)) if matches!(level, Level::System) => {
                        return Ok(Tally::skipped());
                    }
                    Some((_, config)) => config.soft_names().into_iter().collect(),
                    None => BTreeSet::new(),
                };
                let mut targets = names.clone();
                if let Some((_, config)) = &resolved {
                    targets.extend(config.limits.iter().map(|l| l.name.clone()));
                }
                if targets.is_empty() {
                    return Ok(Tally::default());
                }
                let mut update = UpdateBuilder::new();
                for name in &targets {
                    if soft.contains(name) {
                        update.set(&limit_attr(name, field::SOFT), Attr::n(deadline(t)));
                    } else {
                        update.remove(&limit_attr(name, field::SOFT));
                    }
                }
                Ok(Tally::stamped(self.write(&key, update, None).await?))
            }
            .boxed()
        })
        .await
    }
}
