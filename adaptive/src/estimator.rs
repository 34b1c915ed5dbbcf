//! The factor of one (resource, limit), from the minutes the controller has
//! observed: the law `factor = clamp(t / u1, 1, max_factor)`, where `t` is
//! the target utilization and `u1` the resource's utilization had every
//! opted-in level been at base.
//!
//! `u1` is not observed once the factor is above one, so it is estimated
//! from a model of utilization at a factor, `u(f) = a + b f` with
//! `a, b >= 0`: the part of demand that does not respond to the limit, and
//! the part that takes what the factor gives (buckets accrue linearly in
//! the factor); `u1 = a + b`. One observation `(f, u)` bounds it:
//! `u / f <= u1 <= u`, so the law's factor lies between `t / u` (no use
//! responds) and `f t / u` (all of it does). Under the model, a factor up to
//! `f t / u` never puts use above `t`: `u(f t / u) <= t`. Hence:
//!
//! - once observations at two factors have fitted the model, it goes to
//!   `t / u1`, kept within the bounds of the latest observations (never past
//!   `f t / u`, the reading that all use follows the limit);
//! - before that (one factor observed since demand last changed), it reads
//!   `u1` with the response measured before the change, if demand fell or
//!   drifted (a fall never raises use past `t` under the bound above), and
//!   with none at the start: `t / u`, the lower end;
//! - a single minute above `t` beyond the noise band is a surge, and cuts at
//!   once to `t / u`, the factor no composition of demand can overload.
//!
//! An observation outside what any `a, b >= 0` explains from the recent ones,
//! beyond noise, or two in a row off the model the same way, is a change in
//! demand: the observations before it are dropped, and with them the model.
//! A minute in which the factor changed (`mixed`) is searched for a surge
//! only. A move needs the law's factor outside a band that starts at 5% and
//! widens with the observed noise; turning around takes 7%, each further
//! turn before the factor has held for ten minutes 7% more.

/// The smallest change ever written: a move rewrites every governed bucket.
pub const WRITE_BAND: f64 = 0.05;
/// The least change that turns the factor around: above the write band, so
/// that noise at the band's edge cannot flip it back and forth.
const TURN_BAND: f64 = 0.07;
/// Clean minutes without a move after which the factor counts as settled
/// and a turn costs the base band again.
const SETTLED: u32 = 10;
/// Each observation counts this much less than the next one when the
/// utilization at the latest factor is estimated: a change shows within a
/// few minutes, noise still averages out (about six minutes' worth).
const RECENCY: f64 = 0.85;
/// Observations kept since demand last changed: enough to average noise
/// over, few enough that an old regime drops out within minutes.
const HISTORY: usize = 8;
/// Factors this close (log scale, 3%) count as the same factor.
const SAME: f64 = 0.03;
/// The least move (log scale, 9%) without a fitted model: far enough for
/// the minute after it to read a slope above the noise floor.
const SPREAD: f64 = 0.09;
/// An observation this far (log scale, 15%) outside what the model family
/// explains is a change in demand; or `JUMP_NOISE` noise deviations if more.
const JUMP_FLOOR: f64 = 0.15;
const JUMP_NOISE: f64 = 4.0;
/// No minute-to-minute noise is assumed below this (log scale): a demand
/// that was steady for a while is not a promise that it stays so.
const NOISE_FLOOR: f64 = 0.02;
/// Standard errors of the slope within which the law's factor could still
/// be the one in force: two, so that a slope read from noise (one in
/// twenty) is no reason to move.
const PLAUSIBLE: f64 = 1.0;
/// The least noise about a fitted line (relative): a line through points
/// that fit it exactly is still only as good as the minutes' arithmetic.
const RESIDUAL_FLOOR: f64 = 0.002;
/// Noise assumed before any is measured (log scale).
const PRIOR_NOISE: f64 = 0.04;
/// Moves need the law's factor this many noise deviations (of the mean) away.
const NOISE_BAND: f64 = 1.5;
/// Two observations in a row at one factor this many deviations off the
/// model, the same way, are a drift in demand (across factors, a misfit may
/// be the model's: use bends where levels cap).
const DRIFT: f64 = 2.0;
/// One minute this many noise deviations above the target is a surge: well
/// outside what noise puts above a target that use settles at.
const SURGE_NOISE: f64 = 2.5;
/// A minute's last third is read against noise this much wider than a
/// whole minute's (a third of the requests: about the square root of 3).
const TAIL_NOISE: f64 = 1.75;
/// One complete minute: its utilization (used over estimated capacity), the
/// factor in force over it (time-weighted when it changed within the minute:
/// what buckets accrue is linear in the factor), and whether it changed. A
/// minute under two factors is only searched for a surge: levels capped
/// below the old factor never saw all of it, so its mean misstates the
/// factor behind the use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    pub utilization: f64,
    pub factor: f64,
    pub mixed: bool,
    /// The utilization of the minute's last third, as a rate per minute
    /// (`None` where the sensor did not record it): a surge that began
    /// within the minute shows here before the whole minute's use says so.
    pub tail: Option<f64>,
}

/// What the law is evaluated against: the target utilization `t`
/// (0 < t <= 1) and the most any opted-in level scales.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Law {
    pub target: f64,
    pub max_factor: f64,
}

impl Law {
    /// The request's law: target 1.
    pub fn full(max_factor: f64) -> Law {
        Law {
            target: 1.0,
            max_factor,
        }
    }

    fn target(&self) -> f64 {
        if self.target.is_finite() && self.target > 0.0 {
            self.target.min(1.0)
        } else {
            1.0
        }
    }

    fn max(&self) -> f64 {
        if self.max_factor.is_finite() {
            self.max_factor.max(1.0)
        } else {
            1.0
        }
    }
}

/// Why the factor is what it is: the reason of the last decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// Nothing observed yet.
    #[default]
    Start,
    /// The law's factor is above the one in force, beyond the band.
    Raise,
    /// The law's factor is below the one in force, beyond the band.
    Cut,
    /// One minute above the target beyond noise: cut at once.
    Surge,
    /// A raise right after a surge that did not last: saved tokens spent at once.
    Spike,
    /// Within the band: no write.
    Hold,
    /// No canary came through for two ticks: base.
    Blind,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Start => "start",
            Reason::Raise => "raise",
            Reason::Cut => "cut",
            Reason::Surge => "surge",
            Reason::Spike => "spike",
            Reason::Hold => "hold",
            Reason::Blind => "blind",
        }
    }
}

/// What the controller keeps between ticks for one (resource, limit).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Estimator {
    /// The factor in force.
    pub factor: f64,
    /// `(factor, utilization)` of the clean minutes since demand last changed.
    pub points: Vec<(f64, f64)>,
    /// `(a, b)` of `u(f) = a + b f`, once the points spanned different factors.
    pub model: Option<(f64, f64)>,
    /// The response `b` measured before the last change in demand: how use
    /// at base is read until it is measured again (0 after a surge).
    pub prior: f64,
    /// The standard error of the model's slope.
    pub slope_sd: f64,
    /// Noise of utilization at one factor (log scale), exponentially weighted.
    pub noise: f64,
    /// The last observation's distance from the model (log scale).
    pub surprise: f64,
    /// The last move was down.
    pub fell: bool,
    /// There was a move since the start, the last change in demand or blind spell.
    pub moved: bool,
    /// Turns since demand last changed or the factor last settled.
    pub turns: u32,
    /// Clean minutes since the last move.
    pub quiet: u32,
    /// The last decision's reason.
    pub reason: Reason,
    /// The law's factor at the last decision (before the band).
    pub wanted: f64,
    /// The last minute was a surge.
    pub surged: bool,
    /// The only point is a jump up in demand, kept until a minute at the
    /// same factor confirms it: a jump after which the factor is cut is not
    /// fitted through (it may be saved tokens spent at once).
    pub provisional: bool,
}

impl Default for Estimator {
    fn default() -> Self {
        Estimator {
            factor: 1.0,
            points: Vec::new(),
            model: None,
            prior: 0.0,
            slope_sd: 0.0,
            noise: PRIOR_NOISE,
            surprise: 0.0,
            fell: false,
            moved: false,
            turns: 0,
            quiet: 0,
            reason: Reason::Start,
            wanted: 1.0,
            surged: false,
            provisional: false,
        }
    }
}

/// What a tick decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    Hold,
    Move(f64),
}

/// The estimator's reading, for operators (`zae-limits adaptive explain`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Reading {
    /// `(a, b)`: use that does not respond, and use per unit of factor.
    pub response: Option<(f64, f64)>,
    /// The estimated utilization at base.
    pub at_base: Option<f64>,
    /// The law's factor from it, before the band.
    pub wanted: f64,
    /// The band (relative) a move must clear now.
    pub band: f64,
    /// Noise of a minute's utilization (relative).
    pub noise: f64,
    /// The utilization above which one minute is a surge.
    pub surge_above: f64,
    /// The rate above which a minute's last third is one.
    pub tail_surge_above: f64,
    pub points: Vec<(f64, f64)>,
    pub reason: Reason,
}

impl Estimator {
    /// Takes a complete minute and decides the factor.
    pub fn observe(&mut self, obs: Observation, law: Law) -> Decision {
        let (t, max) = (law.target(), law.max());
        let utilization = if obs.utilization.is_finite() {
            obs.utilization.max(0.0)
        } else {
            0.0
        };
        let point = (obs.factor.clamp(1.0, max), utilization);
        let after_surge = std::mem::take(&mut self.surged);
        let tail = obs.tail.filter(|u| u.is_finite()).map(|u| u.max(0.0));
        if obs.mixed {
            return self.surge_only(point, tail, t);
        }
        let surge = point.1 > self.surge_line(t);
        if !surge && self.factor > 1.0 && self.tail_surged(tail, t) {
            // The minute's last third is a surge its whole use dilutes: it
            // began within the minute. Cut now, not a minute later.
            return self.surge_only(point, tail, t);
        }
        let changed = self.take(point, surge);
        let (f, u, weight) = self.anchor();
        self.wanted = self.law_factor(f, u, t).clamp(1.0, max);
        if surge && point.0 > 1.0 {
            // One minute above the target beyond noise: at once, to what
            // that minute reads if none of its use responds (`t / u`): the
            // one factor that no mix of demand can overload.
            let cut = (t / point.1).max(1.0);
            self.surged = true;
            self.new_step();
            return self.decide(cut, 1.0, Reason::Surge);
        }
        let reason = if self.wanted > self.factor {
            if after_surge && changed {
                Reason::Spike
            } else {
                Reason::Raise
            }
        } else {
            Reason::Cut
        };
        let target = match self.model {
            Some(_) => self.plausible(f, u, t, max),
            None => self.identifying(self.wanted, f * t / u.max(f64::EPSILON), max),
        };
        self.decide(target, weight, reason)
    }

    /// With a fitted model: the factor in force if the law's factor could be
    /// it (the slope `PLAUSIBLE` standard errors either way); else the
    /// nearest factor that could be the law's.
    /// Read from far above base, a slope's error is multiplied by the
    /// factor: noise must not read as a reason to move.
    fn plausible(&self, f: f64, u: f64, t: f64, max: f64) -> f64 {
        let Some((_, b)) = self.model else {
            return self.wanted;
        };
        let at = |slope: f64| {
            let u1 = self.at_base_with(f, u, slope);
            if u1 <= f64::EPSILON {
                max
            } else {
                (t / u1).clamp(1.0, max)
            }
        };
        let sd = PLAUSIBLE * self.slope_sd;
        let (low, high) = (at(b - sd).min(self.wanted), at(b + sd).max(self.wanted));
        self.factor.clamp(low, high)
    }

    /// Without a fitted model, a move goes at least far enough for the
    /// minute after it to measure the response (`SPREAD`), never past the
    /// bound where all use follows the limit: a shorter one would leave the
    /// factor resting on the prior, right or not.
    fn identifying(&self, wanted: f64, all_follow: f64, max: f64) -> f64 {
        if self.model.is_some() || (wanted / self.factor).ln().abs() <= WRITE_BAND.ln_1p() {
            return wanted;
        }
        let step = if wanted > self.factor {
            (self.factor * SPREAD.exp()).min(all_follow).min(max)
        } else {
            (self.factor / SPREAD.exp()).max(1.0)
        };
        if wanted > self.factor {
            wanted.max(step)
        } else {
            wanted.min(step)
        }
    }

    /// No canary sensed for two ticks: nothing is known, so the factor goes
    /// back to base and what was learnt about demand is dropped.
    pub fn blind(&mut self) -> Decision {
        let was = self.factor;
        *self = Estimator {
            noise: self.noise,
            fell: true,
            reason: Reason::Blind,
            ..Estimator::default()
        };
        if was > 1.0 {
            Decision::Move(1.0)
        } else {
            Decision::Hold
        }
    }

    /// The estimator's reading under `law`.
    pub fn reading(&self, law: Law) -> Reading {
        let t = law.target();
        let (f, u, weight) = self.anchor();
        let at_base = (!self.points.is_empty()).then(|| self.at_base(f, u));
        Reading {
            response: self.model,
            at_base,
            wanted: self.wanted,
            band: self.band(weight),
            noise: self.noise.exp_m1(),
            surge_above: self.surge_line(t),
            tail_surge_above: self.tail_line(t),
            points: self.points.clone(),
            reason: self.reason,
        }
    }

    /// `t / u1` from the anchor `(f, u)`; infinite when nothing was used.
    fn law_factor(&self, f: f64, u: f64, t: f64) -> f64 {
        let u1 = self.at_base(f, u);
        if u1 <= f64::EPSILON {
            f64::INFINITY
        } else {
            t / u1
        }
    }

    /// Utilization at base: through the anchor with the fitted response, or
    /// before one the prior; always within what `a, b >= 0` allow at the
    /// anchor, `[u / f, u]`, and below the use seen at any factor (use
    /// never falls as the factor rises), within noise: where levels cap,
    /// use bends and a line through the higher factors reads base too high.
    fn at_base(&self, f: f64, u: f64) -> f64 {
        self.at_base_with(f, u, self.model.map_or(self.prior, |(_, b)| b))
    }

    fn at_base_with(&self, f: f64, u: f64, b: f64) -> f64 {
        let b = b.clamp(0.0, u / f);
        let seen = self
            .points
            .iter()
            .map(|p| p.1)
            .fold(f64::INFINITY, f64::min)
            * (DRIFT * self.noise).exp();
        (u - b * (f - 1.0)).min(seen).max(u / f)
    }

    /// Above this, one minute is a surge: the target beyond the noise band.
    fn surge_line(&self, t: f64) -> f64 {
        t * (WRITE_BAND.max(SURGE_NOISE * self.noise)).exp()
    }

    fn band(&self, weight: f64) -> f64 {
        WRITE_BAND.max(NOISE_BAND * self.noise / weight.max(1.0).sqrt())
    }

    /// Moves to `target` when it is outside the band (`weight`: how many
    /// observations the estimate is worth).
    fn decide(&mut self, target: f64, weight: f64, reason: Reason) -> Decision {
        let urgent = reason == Reason::Surge;
        let mut band = if urgent {
            WRITE_BAND
        } else {
            self.band(weight)
        };
        let turning = self.moved && (target < self.factor) != self.fell;
        if turning && !urgent {
            band = band.max(TURN_BAND * f64::from(1 + self.turns));
        }
        if (target / self.factor).ln().abs() <= band.ln_1p() {
            self.quiet += 1;
            if self.quiet >= SETTLED {
                self.turns = 0;
            }
            self.reason = Reason::Hold;
            return Decision::Hold;
        }
        self.quiet = 0;
        self.moved = true;
        self.turns += u32::from(turning);
        self.fell = target < self.factor;
        self.factor = target;
        self.reason = reason;
        Decision::Move(target)
    }

    /// Whether a minute's last third (`tail`, a rate per minute) is above
    /// the target beyond its own noise.
    fn tail_surged(&self, tail: Option<f64>, t: f64) -> bool {
        tail.is_some_and(|u| u > self.tail_line(t))
    }

    /// Above this rate, a minute's last third is a surge.
    fn tail_line(&self, t: f64) -> f64 {
        t * WRITE_BAND.max(SURGE_NOISE * TAIL_NOISE * self.noise).exp()
    }

    /// A minute under two factors, or one whose last third surged: a surge
    /// above the target (the whole minute's, else its last third's) cuts at
    /// once, a full step from the lower of the two factors (use, partly at
    /// another factor or before the surge, says little about either);
    /// anything else waits for a clean minute.
    fn surge_only(&mut self, point: (f64, f64), tail: Option<f64>, t: f64) -> Decision {
        let surged = if point.1 > self.surge_line(t) {
            point.1
        } else if self.tail_surged(tail, t) {
            tail.unwrap_or(point.1)
        } else {
            0.0
        };
        if surged <= 0.0 || self.factor <= 1.0 {
            self.reason = Reason::Hold;
            return Decision::Hold;
        }
        self.new_step();
        self.forget(false);
        self.surged = true;
        let cut = (t / surged).max(1.0).min(self.factor);
        self.wanted = cut;
        self.decide(cut, 1.0, Reason::Surge)
    }

    /// The utilization at `factor` that some `a, b >= 0` through the anchor
    /// explains, widened by the jump margin; `None` without observations.
    fn explained(&self, factor: f64) -> Option<(f64, f64)> {
        if self.points.is_empty() {
            return None;
        }
        let (anchor_f, anchor_u, _) = self.anchor();
        let ratio = factor / anchor_f;
        let margin = self.margin().exp();
        Some((
            anchor_u * ratio.min(1.0) / margin,
            anchor_u * ratio.max(1.0) * margin,
        ))
    }

    /// How far (log scale) beyond what the model family explains an
    /// observation must be to be a change in demand.
    fn margin(&self) -> f64 {
        JUMP_FLOOR.max(JUMP_NOISE * self.noise)
    }

    /// Adds a clean observation; restarts the history when demand changed,
    /// and then says so. The response measured before is kept as the prior
    /// unless the observation is a `surge`.
    fn take(&mut self, point: (f64, f64), surge: bool) -> bool {
        let near = |p: &(f64, f64), f: f64| (p.0 / f).ln().abs() < SAME;
        if std::mem::take(&mut self.provisional)
            && self.points.last().is_some_and(|p| !near(p, point.0))
        {
            self.restart(vec![point], true);
            return true;
        }
        if near(&point, 1.0) && self.points.iter().any(|p| !near(p, 1.0)) {
            // At base, use is use at base: what other factors said of it
            // through the model matters no more.
            let mut at_base: Vec<_> = self
                .points
                .iter()
                .filter(|p| near(p, 1.0))
                .copied()
                .collect();
            at_base.push(point);
            self.restart(at_base, true);
            return false;
        }
        let Some((low, high)) = self.explained(point.0) else {
            self.points.push(point);
            self.learn();
            return false;
        };
        let predicted = self.predict(point.0);
        let surprise = log(point.1) - log(predicted);
        let drift = DRIFT * self.noise;
        if point.1 < low || point.1 > high {
            self.new_step();
            self.restart(vec![point], !surge);
            self.provisional = point.1 > high;
            true
        } else if surprise.abs() > drift
            && self.surprise.abs() > drift
            && surprise.signum() == self.surprise.signum()
            && self
                .points
                .last()
                .is_some_and(|p| (p.0 / point.0).ln().abs() < SAME)
        {
            let last = *self.points.last().expect("explained() found points");
            self.restart(vec![last, point], !surge);
            true
        } else {
            self.points.push(point);
            if self.points.len() > HISTORY {
                let oldest = self.evictable();
                self.points.remove(oldest);
            }
            self.learn();
            self.surprise = surprise;
            // A surge the model explains is confirmed by the next minute at
            // its factor, or dropped as saved tokens spent at once.
            self.provisional = surge;
            false
        }
    }

    /// The point the history drops when full: the oldest, but for one that
    /// alone stands at the lowest or the highest factor: the spread of
    /// factors measures the response, and where levels cap, use bends, so
    /// the slope between nearby factors says little about use at base.
    fn evictable(&self) -> usize {
        let factors = self.points.iter().map(|p| p.0);
        let low = factors.clone().fold(f64::INFINITY, f64::min);
        let high = factors.fold(f64::NEG_INFINITY, f64::max);
        let near = |a: f64, b: f64| (a / b).ln().abs() < SAME;
        let alone_at = |edge: f64| {
            let at: Vec<usize> = (0..self.points.len())
                .filter(|&i| near(self.points[i].0, edge))
                .collect();
            (at.len() == 1).then(|| at[0])
        };
        let kept = [alone_at(low), alone_at(high)];
        (0..self.points.len())
            .find(|i| !kept.contains(&Some(*i)))
            .unwrap_or(0)
    }

    /// Demand jumped: a new step, whose first move is no turn.
    fn new_step(&mut self) {
        self.moved = false;
        self.turns = 0;
    }

    /// Drops the observations and the model; the response measured is kept
    /// as the prior when `keep_response`.
    fn forget(&mut self, keep_response: bool) {
        self.prior = match (keep_response, self.model) {
            (true, Some((_, b))) => b,
            (true, None) => self.prior,
            (false, _) => 0.0,
        };
        self.points.clear();
        self.model = None;
        self.surprise = 0.0;
    }

    /// Restarts from `points`: what was learnt about the response to the
    /// factor may not hold for the demand that changed.
    fn restart(&mut self, points: Vec<(f64, f64)>, keep_response: bool) {
        self.forget(keep_response);
        self.points = points;
        self.learn();
    }

    /// Refits the model once the points span different factors, and the
    /// noise (the spread of utilization at the latest factor).
    fn learn(&mut self) {
        // Points that no longer span factors keep the model they fitted.
        if let Some((a, b, sd)) = fit(&self.points, self.noise, self.prior) {
            self.model = Some((a, b));
            self.slope_sd = sd;
        }
        let (f_now, u_now, _) = self.anchor();
        let same: Vec<f64> = self
            .points
            .iter()
            .filter(|p| (p.0 / f_now).ln().abs() < SAME)
            .map(|p| log(p.1) - log(u_now))
            .collect();
        if same.len() >= 2 {
            let variance = same.iter().map(|d| d * d).sum::<f64>() / (same.len() - 1) as f64;
            self.noise = (0.7 * self.noise.powi(2) + 0.3 * variance)
                .sqrt()
                .max(NOISE_FLOOR);
        }
    }

    /// Utilization at a factor: the model's, or the anchor's.
    fn predict(&self, factor: f64) -> f64 {
        match self.model {
            Some((a, b)) => a + b * factor,
            None => self.anchor().1,
        }
    }

    /// The latest factor, the utilization there as the observations project
    /// it (weighted by closeness: a misfit matters less nearby), and the
    /// weights' sum: how many observations the estimate is worth.
    fn anchor(&self) -> (f64, f64, f64) {
        let Some(&(f_last, _)) = self.points.last() else {
            return (self.factor, 0.0, 1.0);
        };
        let b = self.model.map_or(0.0, |(_, b)| b);
        let (mut sum, mut weights) = (0.0, 0.0);
        for (age, &(f, u)) in self.points.iter().rev().enumerate() {
            let near = (f / f_last).ln();
            let weight = if self.model.is_some() {
                1.0 / (1.0 + (near / SPREAD).powi(2))
            } else if near.abs() < SAME {
                1.0
            } else {
                0.0
            } * RECENCY.powi(age as i32);
            sum += weight * (u + b * (f_last - f));
            weights += weight;
        }
        (f_last, (sum / weights).max(0.0), weights)
    }
}

/// The model through `points` and its slope's standard error, `None` while
/// they sit at one factor: least squares within `a, b >= 0`, its slope
/// weighed against the `prior` by their variances. The fit's is the noise over the factors' spread, so a
/// slope read across factors a few percent apart counts little; the
/// prior's is the whole range a slope can take (`0..u / f`), so that it
/// counts only where the points cannot tell.
fn fit(points: &[(f64, f64)], noise: f64, prior: f64) -> Option<(f64, f64, f64)> {
    let n = points.len() as f64;
    let mean_f = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_u = points.iter().map(|p| p.1).sum::<f64>() / n;
    let cov: f64 = points.iter().map(|p| (p.0 - mean_f) * (p.1 - mean_u)).sum();
    let var: f64 = points.iter().map(|p| (p.0 - mean_f).powi(2)).sum();
    if var < (SAME * mean_f).powi(2) {
        return None;
    }
    let mut b = (cov / var).max(0.0);
    if mean_u - b * mean_f < 0.0 {
        // Through the origin: all of use responds.
        let uf: f64 = points.iter().map(|p| p.0 * p.1).sum();
        let ff: f64 = points.iter().map(|p| p.0 * p.0).sum();
        b = uf / ff;
    }
    // The noise about the line, once there are points to spare for it;
    // before, the noise measured at one factor.
    let spread = if points.len() > 2 {
        let residuals: f64 = points
            .iter()
            .map(|p| (p.1 - (mean_u + b * (p.0 - mean_f))).powi(2))
            .sum();
        (residuals / (n - 2.0)).sqrt().max(RESIDUAL_FLOOR * mean_u)
    } else {
        noise * mean_u
    };
    let fit_var = spread.powi(2) / var;
    let prior_var = (mean_u / mean_f).powi(2).max(f64::MIN_POSITIVE);
    let weight = 1.0 / fit_var + 1.0 / prior_var;
    let b = ((b / fit_var + prior / prior_var) / weight).clamp(0.0, mean_u / mean_f);
    Some((mean_u - b * mean_f, b, weight.recip().sqrt()))
}

/// A log that treats an idle minute as very low, not minus infinity.
fn log(utilization: f64) -> f64 {
    utilization.max(1e-6).ln()
}

#[cfg(test)]
mod tests;
