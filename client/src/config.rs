//! The limits an acquire enforces, resolved as the 0.17.0 client resolves
//! them: entity(resource), entity(`_default_`), resource, system; the first
//! level holding a limit wins whole. The walk for `disabled` and `cascade`
//! covers the first three and is never answered from a cache; the system
//! level (its limits and `on_unavailable`) is cached for the configured TTL.

use crate::error::{Error, Feature};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use zae_table::config::{Disabled, LevelConfig, LimitConfig};
use zae_table::keys::config_key;
use zae_table::level::Level;
use zae_table::schedule::LimitSchedule;
use zae_table::store::Store;

/// What to do when the table cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnUnavailable {
    /// Admit with a lease that writes nothing.
    Allow,
    /// Fail the acquire (the 0.17.0 default).
    #[default]
    Block,
}

impl OnUnavailable {
    fn parse(text: &str) -> Option<OnUnavailable> {
        match text {
            "allow" => Some(OnUnavailable::Allow),
            "block" => Some(OnUnavailable::Block),
            _ => None,
        }
    }
}

/// The limits of one (entity, resource) and what decides around them.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub limits: Vec<LimitConfig>,
    /// The level they came from.
    pub level: Level,
    pub disabled: Option<(Disabled, Level)>,
    /// The most specific level's `cascade`, when one sets it.
    pub cascade: Option<bool>,
    /// The limits are the caller's `limits=`: soft-ness is trusted from
    /// them and stamped on nothing; item limits they do not name are not gated.
    pub from_override: bool,
    /// The zone the winning level's schedules are read in (`sched_tz`).
    pub sched_tz: Option<String>,
}

impl Resolved {
    pub fn limit(&self, name: &str) -> Option<&LimitConfig> {
        self.limits.iter().find(|l| l.name == name)
    }
    pub fn is_soft(&self, name: &str) -> bool {
        self.limit(name).is_some_and(|l| l.soft)
    }
    /// The walk says `disabled: "bypass"`: admitted and counted, never
    /// limited (its buckets carry a `bypass` stamp).
    pub fn bypassed(&self) -> bool {
        matches!(self.disabled, Some((Disabled::Bypass, _)))
    }
    /// Entity-level limits carry no TTL; resource and system ones do.
    pub fn is_entity_level(&self) -> bool {
        matches!(self.level, Level::Entity { .. })
    }
}

/// The system level, cached.
pub struct SystemCache {
    ttl: Duration,
    slot: Mutex<Option<(Instant, Option<LevelConfig>)>>,
    /// The last `on_unavailable` read, kept when a later read fails.
    last_mode: Mutex<Option<OnUnavailable>>,
}

impl SystemCache {
    pub fn new(ttl: Duration) -> Self {
        SystemCache {
            ttl,
            slot: Mutex::new(None),
            last_mode: Mutex::new(None),
        }
    }

    fn cached(&self) -> Option<Option<LevelConfig>> {
        let slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref()
            .filter(|(at, _)| !self.ttl.is_zero() && at.elapsed() < self.ttl)
            .map(|(_, config)| config.clone())
    }

    /// The system level, from the cache or one eventually consistent read.
    pub async fn get<S: Store>(
        &self,
        store: &S,
        namespace: &str,
    ) -> Result<Option<LevelConfig>, Error> {
        if let Some(hit) = self.cached() {
            return Ok(hit);
        }
        let (pk, sk) = config_key(namespace, &Level::System);
        let config = store
            .get(&pk, &sk, false)
            .await
            .map_err(Error::store)?
            .as_ref()
            .map(LevelConfig::decode);
        if let Some(mode) = config
            .as_ref()
            .and_then(|c| c.on_unavailable.as_deref())
            .and_then(OnUnavailable::parse)
        {
            *self.last_mode.lock().unwrap_or_else(|p| p.into_inner()) = Some(mode);
        }
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), config.clone()));
        Ok(config)
    }

    /// `on_unavailable` from the system level; the last value seen when the
    /// read fails, else block.
    pub async fn mode<S: Store>(&self, store: &S, namespace: &str) -> OnUnavailable {
        match self.get(store, namespace).await {
            Ok(config) => config
                .and_then(|c| c.on_unavailable.as_deref().and_then(OnUnavailable::parse))
                .unwrap_or_default(),
            Err(_) => self
                .last_mode
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_default(),
        }
    }
}

/// Reads the three walk levels (one BatchGetItem, eventually consistent,
/// never cached) and the system level, and resolves them.
pub async fn resolve<S: Store>(
    store: &S,
    system: &SystemCache,
    namespace: &str,
    entity: &str,
    resource: &str,
) -> Result<Resolved, Error> {
    let walk = Level::resolution(entity, resource, false);
    let keys: Vec<(String, String)> = walk.iter().map(|l| config_key(namespace, l)).collect();
    let items = store.get_many(&keys, false).await.map_err(Error::store)?;
    let mut levels: Vec<(Level, Option<LevelConfig>)> = walk
        .into_iter()
        .zip(&keys)
        .map(|(level, (pk, sk))| {
            let item = items.iter().find(|i| {
                zae_table::keys::pk_of(i) == Some(pk) && zae_table::keys::sk_of(i) == Some(sk)
            });
            (level, item.map(LevelConfig::decode))
        })
        .collect();
    let disabled = levels
        .iter()
        .find_map(|(level, c)| Some((c.as_ref()?.disabled?, level.clone())));
    let cascade = levels.iter().find_map(|(_, c)| c.as_ref()?.cascade);
    if let Some(limits) = crate::overrides::current() {
        // The caller's limits replace every level's; like the resource and
        // system levels', a bucket they create carries a TTL.
        let level = Level::Resource(resource.to_owned());
        refuse_unsupported(&limits, None, (entity, resource), &level)?;
        return Ok(Resolved {
            limits: limits.to_vec(),
            level,
            disabled,
            cascade,
            from_override: true,
            sched_tz: None,
        });
    }
    levels.push((Level::System, system.get(store, namespace).await?));
    let Some((level, config)) = levels
        .into_iter()
        .find(|(_, c)| c.as_ref().is_some_and(|c| !c.limits.is_empty()))
    else {
        return Err(Error::NoLimits {
            entity: entity.to_owned(),
            resource: resource.to_owned(),
        });
    };
    let (limits, sched_tz) = config.map(|c| (c.limits, c.sched_tz)).unwrap_or_default();
    // A disabled resource is `ResourceDisabled` whatever its limits carry,
    // as in Python; the caller refuses it.
    if !matches!(disabled, Some((Disabled::Yes, _))) {
        refuse_unsupported(&limits, sched_tz.as_deref(), (entity, resource), &level)?;
    }
    Ok(Resolved {
        limits,
        level,
        disabled,
        cascade,
        from_override: false,
        sched_tz,
    })
}

/// A limit this client cannot enforce as the Python client does.
fn refuse_unsupported(
    limits: &[LimitConfig],
    tz: Option<&str>,
    (entity, resource): (&str, &str),
    level: &Level,
) -> Result<(), Error> {
    for limit in limits {
        let resets = limit.rsched.is_some() || limit.reset_after_seconds.is_some();
        // A zero rate with no reset never recovers, and a rate beside a
        // reset is two mechanisms: 0.17.0 refuses both shapes.
        let feature = if (limit.refill_amount == 0) != resets {
            Feature::Quota
        } else if let Err(e) = schedule_of(limit, tz) {
            // A schedule this build cannot read (0.17.0 refuses it too).
            tracing::warn!(limit = %limit.name, error = %e, "unreadable schedule");
            Feature::Schedule
        } else {
            continue;
        };
        return Err(Error::Unsupported {
            feature,
            entity: entity.to_owned(),
            resource: resource.to_owned(),
            at: format!("limit {} at the {} level", limit.name, level.describe()),
        });
    }
    Ok(())
}

/// A configured limit's schedules, read in `tz` (`None`: UTC); `None` when
/// it has none.
pub fn schedule_of(
    limit: &LimitConfig,
    tz: Option<&str>,
) -> Result<Option<LimitSchedule>, zae_table::schedule::ScheduleError> {
    let sched = limit.sched.as_deref().unwrap_or("");
    let rsched = limit.rsched.as_deref().unwrap_or("");
    if sched.is_empty() && rsched.is_empty() {
        return Ok(None);
    }
    LimitSchedule::decode(sched, rsched, tz).map(Some)
}

impl Resolved {
    /// Each configured limit's schedules, as a slow pass judges by them.
    pub fn schedules(&self) -> std::collections::BTreeMap<String, std::sync::Arc<LimitSchedule>> {
        self.limits
            .iter()
            .filter_map(|l| {
                let schedule = schedule_of(l, self.sched_tz.as_deref()).ok()??;
                Some((l.name.clone(), std::sync::Arc::new(schedule)))
            })
            .collect()
    }
}

/// A quota: no drip, and a reset (a calendar schedule or a duration window).
pub fn is_quota(limit: &LimitConfig) -> bool {
    limit.refill_amount == 0 && (limit.rsched.is_some() || limit.reset_after_seconds.is_some())
}
