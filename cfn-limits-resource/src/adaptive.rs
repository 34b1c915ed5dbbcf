//! `zae-limits adaptive`: operating a namespace's adaptive limits from
//! outside the controller. `reset` returns every stamped bucket to base
//! and every target to a factor of one; the way back to the 0.17.0 Python
//! Lambdas starts with it.

use zae_table::adaptive::pass::{self, Pass};
use zae_table::adaptive::target::Target;
use zae_table::adaptive::{Declaration, Factor};
use zae_table::keys;
use zae_table::store::{Returns, Store, StoreError};

/// What a reset did to one target.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reset {
    pub resource: String,
    pub limit: String,
    pub buckets_stamped: usize,
    pub stamps_lost: usize,
}

/// Every target of `namespace` to base: its factor to one (a new generation,
/// its estimator forgotten), then a whole pass over its buckets.
pub async fn reset<S: Store>(store: &S, namespace: &str) -> Result<Vec<Reset>, StoreError> {
    let item = store
        .get(
            &keys::pk_adaptive(namespace),
            keys::SK_ADAPTIVE_DECLARATION,
            true,
        )
        .await?;
    let declaration = item.and_then(|i| Declaration::from_item(&i).ok());
    let mut done = Vec::new();
    for item in store.query(&Target::query(namespace)).await? {
        let Some(mut target) = Target::from_item(&item) else {
            continue;
        };
        let read = target.generation;
        target.previous = target.factor;
        target.factor = Factor::ONE;
        target.generation += 1;
        target.set_at_ms = chrono::Utc::now().timestamp_millis();
        target.cursor = None;
        target.state = None;
        store
            .update(&target.write(namespace, Some(read)), Returns::Nothing)
            .await?;
        let Pass { stamped, lost, .. } =
            pass::run(store, namespace, declaration.as_ref(), &target, || false).await?;
        if lost == 0 {
            target.stamped = target.generation;
            let generation = target.generation;
            store
                .update(&target.write(namespace, Some(generation)), Returns::Nothing)
                .await?;
        }
        done.push(Reset {
            resource: target.resource,
            limit: target.limit,
            buckets_stamped: stamped,
            stamps_lost: lost,
        });
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zae_table::adaptive::AdaptiveLevel;
    use zae_table::config::{LevelConfig, LimitConfig, build_item};
    use zae_table::{Attr, Item, Level};
    use zae_test_support::memory::MemoryStore;

    #[tokio::test]
    async fn a_reset_returns_every_stamped_bucket_to_base_with_vu_and_the_target_to_one() {
        let store = MemoryStore::new();
        let limit = LimitConfig::drip("tpm", 10_000, 1_000, 60);
        let config = LevelConfig {
            limits: vec![limit],
            ..LevelConfig::default()
        };
        store.insert(build_item("ns", &Level::System, &config));
        let declaration = Declaration {
            capacity: [("r".into(), [("tpm".into(), 100_000)].into())].into(),
            levels: vec![AdaptiveLevel {
                level: Level::System,
                limit: "tpm".into(),
                max_scale: None,
                max_factor: Factor::from_ppm(10_000_000),
            }],
        };
        store.insert(declaration.to_item("ns"));
        let mut target = Target::base("r", "tpm");
        target.factor = Factor::from_ppm(5_000_000);
        target.generation = 4;
        target.stamped = 4;
        store
            .update(&target.write("ns", None), Returns::Nothing)
            .await
            .unwrap();
        for entity in ["a", "b"] {
            store.insert(Item::from([
                ("PK".into(), Attr::s(format!("ns/BUCKET#{entity}#r#0"))),
                ("SK".into(), Attr::s("#STATE")),
                ("GSI2PK".into(), Attr::s(keys::pk_resource("ns", "r"))),
                ("GSI2SK".into(), Attr::s(format!("BUCKET#{entity}#0"))),
                ("b_tpm_cp".into(), Attr::n(10_000_000)),
                ("b_tpm_ra".into(), Attr::n(5_000_000)),
            ]));
        }
        let done = reset(&store, "ns").await.unwrap();
        assert_eq!(done[0].buckets_stamped, 2);
        for entity in ["a", "b"] {
            let bucket = store
                .item(&format!("ns/BUCKET#{entity}#r#0"), "#STATE")
                .unwrap();
            assert_eq!(bucket["b_tpm_ra"], Attr::n(1_000_000));
            assert_eq!(bucket["vu"], Attr::n(0));
        }
        let (pk, sk) = Target::key("ns", "r", "tpm");
        let target = Target::from_item(&store.item(&pk, &sk).unwrap()).unwrap();
        assert_eq!(
            (target.factor, target.stamped, target.generation),
            (Factor::ONE, 5, 5)
        );
    }
}
