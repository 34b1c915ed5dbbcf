//! What an acquire answers when it does not admit: a rejection with a
//! status for every limit, a disabled resource, an unavailable table, a
//! request the client cannot serve correctly.

use std::time::Duration;
use zae_table::store::StoreError;

/// One limit of one bucket, as a rejection reports it. Figures are whole
/// tokens and per shard, as the 0.17.0 client reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitStatus {
    pub entity: String,
    pub resource: String,
    pub limit: String,
    /// Whole tokens after the refill to now; negative in debt.
    pub available: i64,
    pub requested: i64,
    /// This limit refused the request (never a soft limit).
    pub exceeded: bool,
    /// Milliseconds until it would admit (0 when it passed).
    pub retry_after_ms: i64,
    pub soft: bool,
    /// The shard's ceiling and refill, whole tokens (`cp // shards`).
    pub capacity: i64,
    pub refill_amount: i64,
    pub refill_period_s: i64,
    /// A quota: it does not drip, it comes back whole at its reset (a
    /// calendar edge or a duration window's end). Its body shape has
    /// `resets_at_ms` in place of the refill fields, as 0.17.0's.
    pub quota: bool,
    /// When a quota comes back (epoch ms): its window's end, or the next
    /// reset edge after the instant it was judged (`None` past the scan's
    /// horizon, and for a rate limit).
    pub resets_at_ms: Option<i64>,
}

impl LimitStatus {
    /// A soft limit below zero: admitted into debt.
    pub fn in_debt(&self) -> bool {
        self.soft && self.available < 0
    }
}

/// A rejection (`RateLimitExceeded` in the Python client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitExceeded {
    /// Every limit of every bucket evaluated: the child's first, then the
    /// parent's.
    pub statuses: Vec<LimitStatus>,
    /// The bucket was held by other writers' transactions (#724): nothing
    /// was judged, retry soon.
    pub contended: bool,
}

/// The wait a contended rejection asks for.
pub const CONTENDED_RETRY_MS: i64 = 100;

impl RateLimitExceeded {
    /// The limits that refused: hard limits only.
    pub fn violations(&self) -> impl Iterator<Item = &LimitStatus> {
        self.statuses.iter().filter(|s| s.exceeded)
    }

    /// The longest wait among the violations; soft limits never count.
    pub fn retry_after_ms(&self) -> i64 {
        if self.contended {
            return CONTENDED_RETRY_MS;
        }
        self.violations()
            .map(|s| s.retry_after_ms)
            .max()
            .unwrap_or_default()
    }

    pub fn retry_after(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.retry_after_ms()).unwrap_or_default())
    }

    /// Whole seconds for an HTTP `Retry-After`, rounded up past the wait
    /// (`int(s) + 1`, as the Python client's header value).
    pub fn retry_after_header(&self) -> u64 {
        u64::try_from(self.retry_after_ms() / 1000 + 1).unwrap_or(1)
    }

    /// The violation with the longest wait.
    pub fn primary(&self) -> Option<&LimitStatus> {
        self.violations().max_by_key(|s| s.retry_after_ms)
    }

    /// The 429 body, as the Python client's `RateLimitExceeded.as_dict()`
    /// gives it: the same fields with the same values, but for `message`,
    /// which is this client's own wording (docs/client.md).
    pub fn body(&self) -> serde_json::Value {
        let seconds = |ms: i64| ms as f64 / 1000.0;
        let limits: Vec<serde_json::Value> = self
            .statuses
            .iter()
            .map(|s| {
                let mut entry = serde_json::json!({
                    "entity_id": s.entity, "resource": s.resource, "limit_name": s.limit,
                    "kind": "rate", "capacity": s.capacity, "refill_amount": s.refill_amount,
                    "refill_period_seconds": s.refill_period_s, "available": s.available,
                    "requested": s.requested, "exceeded": s.exceeded,
                    "retry_after_seconds": seconds(s.retry_after_ms), "soft": s.soft,
                });
                // A quota does not drip: its reset instant, not a refill rate.
                if s.quota
                    && let Some(fields) = entry.as_object_mut()
                {
                    fields.remove("refill_amount");
                    fields.remove("refill_period_seconds");
                    fields.insert("kind".into(), "quota".into());
                    fields.insert("resets_at_ms".into(), s.resets_at_ms.into());
                }
                entry
            })
            .collect();
        let wait = seconds(self.retry_after_ms());
        serde_json::json!({
            "error": "rate_limit_exceeded",
            "message": self.to_string(),
            "contended": self.contended,
            "retry_after_seconds": wait,
            // `int(seconds * 1000)`, as Python computes it: the float's
            // truncation, 1 below the milliseconds for some waits.
            "retry_after_ms": (wait * 1000.0) as i64,
            "limits": limits,
        })
    }
}

impl std::fmt::Display for RateLimitExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.contended {
            let who = self
                .statuses
                .first()
                .map(|s| format!("{}/{}", s.entity, s.resource))
                .unwrap_or_default();
            return write!(
                f,
                "rate limiter contended for {who}: concurrent transactions on the bucket; retry after 0.1 s"
            );
        }
        let names: Vec<String> = self
            .violations()
            .map(|s| {
                format!(
                    "{}/{} {}: {} requested, {} available",
                    s.entity, s.resource, s.limit, s.requested, s.available
                )
            })
            .collect();
        write!(
            f,
            "rate limit exceeded ({}); retry after {:.3} s",
            names.join("; "),
            self.retry_after_ms() as f64 / 1000.0
        )
    }
}

/// A feature of the table the first version of this client does not
/// build; refused rather than acquired wrongly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// A quota on a sharded bucket (allowance moves), a top-up, or a
    /// limit 0.17.0 cannot construct.
    Quota,
    /// A stored schedule this build cannot read.
    Schedule,
    /// `disabled: "bypass"` on a config level.
    Bypass,
}

impl Feature {
    pub fn name(self) -> &'static str {
        match self {
            Feature::Quota => {
                "this quota shape (on a sharded bucket, topped up, or a zero rate with no reset)"
            }
            Feature::Schedule => "a stored schedule this build cannot read",
            Feature::Bypass => "bypass (disabled: \"bypass\" on a config level)",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    RateLimitExceeded(RateLimitExceeded),
    /// `disabled` on a config level or stamped on the bucket.
    #[error("resource {resource} is disabled for entity {entity} (at the {level} level)")]
    ResourceDisabled {
        entity: String,
        resource: String,
        level: String,
    },
    /// A bad name or amount in the request.
    #[error("{0}")]
    Validation(String),
    /// No limit configured for the pair at any level: the operator's
    /// configuration, not the request (the Python client's
    /// `ValidationError`).
    #[error("no limits configured for entity '{entity}' and resource '{resource}' at any level")]
    NoLimits { entity: String, resource: String },
    #[error("{feature} on {entity}/{resource} ({at}) is not supported by zae-client yet; use the Python client for it", feature = .feature.name())]
    Unsupported {
        feature: Feature,
        entity: String,
        resource: String,
        /// The config level or item it came from.
        at: String,
    },
    /// The table refused the caller's credentials.
    #[error(
        "permission denied: {0} -- acquire needs dynamodb:GetItem, BatchGetItem, UpdateItem, PutItem and ConditionCheckItem on the table (docs/client.md, Permissions)"
    )]
    PermissionDenied(StoreError),
    /// The table could not be reached or answered an error (after the SDK's
    /// retries), under `OnUnavailable::Block`.
    #[error("rate limiter unavailable: {0}")]
    Unavailable(StoreError),
    /// The namespace is not registered in the table.
    #[error(
        "namespace {0} is not registered in the table (create it with the Python client or the provisioner)"
    )]
    UnknownNamespace(String),
}

impl Error {
    /// The wait a rejection asks for; `None` for other errors.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::RateLimitExceeded(e) => Some(e.retry_after()),
            _ => None,
        }
    }

    pub(crate) fn store(err: StoreError) -> Error {
        if err.is_access_denied() {
            Error::PermissionDenied(err)
        } else {
            Error::Unavailable(err)
        }
    }
}
