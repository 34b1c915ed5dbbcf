//! Bypass on the fast path (§8.2 of the protocol). A pair whose last image
//! carried a `bypass` stamp is written in the bypass shape: `tc` and the
//! write budget only, conditioned on a live stamp, so nothing is debited
//! and nothing refunded. If that write finds no stamp (the bypass was
//! lifted), the pair is forgotten and the acquire's ordinary write is sent
//! once. An expired stamp goes to the slow path, which renews or removes it.

use super::Fast;
use crate::bucket::BucketView;
use crate::error::Error;
use crate::shared::Shared;
use crate::status::Consume;
use zae_table::Attr;
use zae_table::bucket::{BYPASS, field, limit_attr};
use zae_table::keys::{BucketKey, SK_STATE};
use zae_table::milli::MILLI;
use zae_table::store::{ITEM_EXISTS, Store, Update, UpdateBuilder};

/// The bypass-shaped write: each consumed limit counted, one unit of the
/// write budget spent, on a live stamp; no balance is touched or tested.
pub fn update(key: &BucketKey, consume: &Consume, now: i64) -> Update {
    let mut b = UpdateBuilder::new();
    for (name, amount) in consume {
        b.add(
            &limit_attr(name, field::CONSUMED),
            Attr::n(amount.saturating_mul(MILLI)),
        );
    }
    let byp = b.name(BYPASS);
    let now_v = b.value(Attr::n(now));
    let mut terms = vec![ITEM_EXISTS.to_owned(), format!("{byp} > {now_v}")];
    terms.extend(super::update::spend_write_budget(&mut b, now));
    b.build(&key.pk(), SK_STATE, Some(terms.join(" AND ")))
}

impl<S: Store + 'static> Shared<S> {
    /// Whether the pair's last image carried a `bypass` stamp.
    pub(crate) fn knows_bypass(&self, key: &BucketKey) -> bool {
        let pairs = self.bypassed.lock().unwrap_or_else(|p| p.into_inner());
        pairs.contains(&(key.entity.clone(), key.resource.clone()))
    }

    /// An image overrules what the process knew, both ways: a stamp (live
    /// or not) is remembered, its absence forgotten.
    pub(crate) fn learn_bypass(&self, key: &BucketKey, view: &BucketView) {
        self.remember_bypass(key, view.bypass_present);
    }

    pub(crate) fn remember_bypass(&self, key: &BucketKey, stamped: bool) {
        let mut pairs = self.bypassed.lock().unwrap_or_else(|p| p.into_inner());
        let pair = (key.entity.clone(), key.resource.clone());
        if stamped {
            pairs.insert(pair);
        } else {
            pairs.remove(&pair);
        }
    }

    /// The bypass-shaped write on one shard; `None` when it found the stamp
    /// gone (the caller sends the ordinary write once).
    pub(super) async fn fast_bypassed(
        &self,
        key: &BucketKey,
        consume: &Consume,
        now: i64,
    ) -> Result<Option<Fast>, Error> {
        match self.send(key, &update(key, consume, now)).await? {
            Fast::Admitted(mut view) => {
                view.counted_only = true;
                Ok(Some(Fast::Admitted(view)))
            }
            Fast::Refused(view) if !view.bypass_present => Ok(None),
            Fast::Missing => {
                self.remember_bypass(key, false);
                Ok(Some(Fast::Missing))
            }
            other => Ok(Some(other)),
        }
    }
}
