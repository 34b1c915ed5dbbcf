//! Pending fan-out items, the apply's side: a bucket fan-out an apply owes
//! is recorded before the config write that makes it owed, and removed only
//! once it finished, so a run that dies (timeout, deadline guard, crash)
//! leaves the work for the next apply. Layout and lease rules are the 0.17.0
//! ones (`zae_table::provisioner`), so the Python provisioner and this one can
//! take over each other's leftovers.

use std::collections::BTreeMap;
use zae_table::Attr;
use zae_table::keys::{self, Index, SK_PENDING_PREFIX};
use zae_table::provisioner::{
    CURSOR, Cursor, FULL, FanOut, KIND, LEASE, LEVEL, OWNERS, Pending, Share, TARGET, WRITTEN_MS,
    decode_pending,
};
use zae_table::store::{Condition, ITEM_EXISTS, Query, Returns, Store, StoreError, Update};

/// Every pending item of the namespace.
pub async fn read(store: &impl Store, namespace: &str) -> Result<Vec<Pending>, StoreError> {
    let items = store
        .query(&Query {
            index: &Index::TABLE,
            pk: keys::pk_system(namespace),
            sk_prefix: SK_PENDING_PREFIX.into(),
            consistent: true,
        })
        .await?;
    Ok(items.iter().filter_map(decode_pending).collect())
}

/// One apply's hold on pending items.
pub struct Holder<'a, S> {
    pub store: &'a S,
    pub namespace: String,
    pub token: String,
    pub lease_ms: i64,
    pub full: bool,
}

impl<S: Store> Holder<'_, S> {
    fn entry(&self) -> Attr {
        Attr::M(BTreeMap::from([
            (LEASE.to_owned(), Attr::n(self.lease_ms)),
            (FULL.to_owned(), Attr::Bool(self.full)),
        ]))
    }

    fn base(&self, fan_out: &FanOut) -> Update {
        let pk = keys::pk_system(&self.namespace);
        Update {
            values: BTreeMap::from([
                (":gpk".to_owned(), Attr::s(&self.namespace)),
                (":gsk".to_owned(), Attr::s(&pk)),
                (":kind".to_owned(), Attr::s(fan_out.kind.name())),
                (":level".to_owned(), Attr::s(fan_out.level.kind())),
                (
                    ":target".to_owned(),
                    Attr::s(fan_out.level.target().unwrap_or_default()),
                ),
                (
                    ":written".to_owned(),
                    Attr::n(chrono::Utc::now().timestamp_millis()),
                ),
                (":entry".to_owned(), self.entry()),
            ]),
            names: BTreeMap::from([
                ("#tok".to_owned(), self.token.clone()),
                ("#lvl".to_owned(), LEVEL.to_owned()),
                ("#tgt".to_owned(), TARGET.to_owned()),
                ("#o".to_owned(), OWNERS.to_owned()),
                ("#kind".to_owned(), KIND.to_owned()),
                ("#wr".to_owned(), WRITTEN_MS.to_owned()),
            ]),
            pk,
            sk: fan_out.sk(),
            ..Update::default()
        }
    }

    /// Records this apply's share of `fan_out` before it becomes owed.
    pub async fn write_ahead(&self, fan_out: &FanOut) -> Result<(), StoreError> {
        const FIELDS: &str = "GSI4PK = :gpk, GSI4SK = :gsk, #kind = :kind, #lvl = :level, #tgt = :target, #wr = :written";
        let mut last = None;
        for _ in 0..2 {
            for (expression, condition) in [
                (
                    format!("SET #o = :owners, {FIELDS}"),
                    "attribute_not_exists(#o)",
                ),
                (
                    format!("SET #o.#tok = :entry, {FIELDS}"),
                    "attribute_exists(#o)",
                ),
            ] {
                let mut update = self.base(fan_out);
                if expression.contains(":owners") {
                    let entry = update.values.remove(":entry").expect("set in base");
                    update.names.remove("#tok");
                    update.values.insert(
                        ":owners".into(),
                        Attr::M(BTreeMap::from([(self.token.clone(), entry)])),
                    );
                }
                update.expression = expression;
                update.condition = Some(condition.into());
                match self.store.update(&update, Returns::Nothing).await {
                    Ok(_) => return Ok(()),
                    Err(err @ StoreError::ConditionFailed { .. }) => last = Some(err),
                    Err(err) => return Err(err),
                }
            }
        }
        Err(last.expect("two rounds ran"))
    }

    /// Takes over an item nobody is working on, removing the expired shares.
    /// `Ok(false)` when another apply got there first.
    pub async fn claim(&self, pending: &Pending, now_ms: i64) -> Result<bool, StoreError> {
        let mut update = self.base(&pending.fan_out);
        let expired: Vec<&Share> = pending
            .shares
            .iter()
            .filter(|s| s.expired(now_ms))
            .collect();
        let mut removes = Vec::new();
        let mut conditions = vec![ITEM_EXISTS.to_owned()];
        for (i, share) in expired.iter().enumerate() {
            let alias = format!("#e{i}");
            update.names.insert(alias.clone(), share.token.clone());
            removes.push(format!("#o.{alias}"));
            conditions.push(format!(
                "attribute_exists(#o.{alias}) AND (attribute_not_exists(#o.{alias}.#l) OR #o.{alias}.#l < :now)"
            ));
        }
        if !expired.is_empty() {
            update.values.insert(":now".into(), Attr::n(now_ms));
            update.names.insert("#l".into(), LEASE.into());
        }
        if pending.has_map {
            update.expression = "SET #o.#tok = :entry".into();
            if pending.shares.is_empty() {
                conditions.push("size(#o) = :zero".into());
                update.values.insert(":zero".into(), Attr::n(0));
            }
        } else {
            let entry = update.values.remove(":entry").expect("set in base");
            update.names.remove("#tok");
            update.values.insert(
                ":owners".into(),
                Attr::M(BTreeMap::from([(self.token.clone(), entry)])),
            );
            update.expression = "SET #o = :owners".into();
            conditions.push("attribute_not_exists(#o)".into());
        }
        if !removes.is_empty() {
            update
                .expression
                .push_str(&format!(" REMOVE {}", removes.join(", ")));
        }
        // Only the values the expressions use may be sent.
        for unused in [":gpk", ":gsk", ":kind", ":level", ":target", ":written"] {
            update.values.remove(unused);
        }
        for unused in ["#lvl", "#tgt", "#kind", "#wr"] {
            update.names.remove(unused);
        }
        update.condition = Some(conditions.join(" AND "));
        match self.store.update(&update, Returns::Nothing).await {
            Ok(_) => Ok(true),
            Err(StoreError::ConditionFailed { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// An update of `fan_out`'s item, only while this apply holds a share
    /// (`#o.#tok`); `names` and `values` are the expression's others.
    fn on_share<const N: usize, const V: usize>(
        &self,
        fan_out: &FanOut,
        expression: &str,
        names: [(&str, &str); N],
        values: [(&str, Attr); V],
    ) -> Update {
        let mut all = BTreeMap::from([
            ("#o".to_owned(), OWNERS.to_owned()),
            ("#tok".to_owned(), self.token.clone()),
        ]);
        all.extend(names.map(|(k, v)| (k.to_owned(), v.to_owned())));
        Update {
            pk: keys::pk_system(&self.namespace),
            sk: fan_out.sk(),
            expression: expression.into(),
            condition: Some("attribute_exists(#o.#tok)".into()),
            names: all,
            values: values.map(|(k, v)| (k.to_owned(), v)).into_iter().collect(),
        }
    }

    /// Writes an update that needs this apply's share; a share gone (taken
    /// over after the lease) is nothing to do.
    async fn while_held(&self, update: &Update) -> Result<(), StoreError> {
        match self.store.update(update, Returns::Nothing).await {
            Ok(_) | Err(StoreError::ConditionFailed { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Records where this apply's run of `fan_out` stopped, while it still
    /// holds a share.
    pub async fn save_cursor(&self, fan_out: &FanOut, cursor: &Cursor) -> Result<(), StoreError> {
        let update = self.on_share(
            fan_out,
            "SET #c = :c",
            [("#c", CURSOR)],
            [(":c", cursor.encode())],
        );
        self.while_held(&update).await
    }

    /// Drops this apply's share, and the place of a run that is now
    /// finished; the item goes when no share is left.
    /// `Ok(true)` when this release removed the item.
    pub async fn release(&self, fan_out: &FanOut) -> Result<bool, StoreError> {
        let update = self.on_share(fan_out, "REMOVE #o.#tok, #c", [("#c", CURSOR)], []);
        let (pk, sk) = (update.pk.clone(), update.sk.clone());
        let after = match self.store.update(&update, Returns::AllNew).await {
            Ok(after) => after,
            Err(StoreError::ConditionFailed { .. }) => return Ok(false),
            Err(err) => return Err(err),
        };
        let empty = match after.as_ref().and_then(|item| item.get(OWNERS)) {
            Some(Attr::M(owners)) => owners.is_empty(),
            _ => true,
        };
        if !empty {
            return Ok(false);
        }
        let condition = Condition {
            expression: "attribute_not_exists(#o) OR size(#o) = :zero".into(),
            names: BTreeMap::from([("#o".to_owned(), OWNERS.to_owned())]),
            values: BTreeMap::from([(":zero".to_owned(), Attr::n(0))]),
        };
        match self.store.delete(&pk, &sk, Some(&condition)).await {
            Ok(_) => Ok(true),
            // Another apply took a share meanwhile: the item stays, theirs.
            Err(StoreError::ConditionFailed { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Ends this apply's lease on work it could not finish, so the next
    /// apply retries it at once instead of waiting the lease out.
    pub async fn expire(&self, fan_out: &FanOut, now_ms: i64) -> Result<(), StoreError> {
        let update = self.on_share(
            fan_out,
            "SET #o.#tok.#l = :past, #o.#tok.#f = :no",
            [("#l", LEASE), ("#f", FULL)],
            [(":past", Attr::n(now_ms - 1)), (":no", Attr::Bool(false))],
        );
        self.while_held(&update).await
    }
}
