//! The factor of one (resource, limit): the root of `f x u(f) = 1`, the
//! law's fixed point `f = clamp(1 / u(f), 1, max_factor)`, found from the
//! minutes the controller has observed.
//!
//! Utilization is modelled as `u(f) = a + b x f` with `a, b >= 0`: the part of
//! demand that does not respond to the limit, and the part that takes what
//! the factor gives (buckets accrue linearly in the factor). Two observations
//! at different factors fit the model, and its root is a quadratic's. Since
//! `f x u(f)` is then convex on a log scale, the root is approached without
//! overshoot from above, and from below once the model is fitted near it.
//!
//! Before a model is fitted the controller takes the safe side: going down,
//! a full step (`b = 0`, to `1 / u`), which cannot leave the factor too high;
//! going up, a step as if half of use responded (two thirds of the way on a
//! log scale), or after a move down, as if all of it did (`sqrt(f / u)`),
//! which cannot overshoot, so that the factor turns around at most once.
//!
//! An observation outside what any `a, b >= 0` explains from the last ones,
//! beyond noise, or two in a row off the model the same way, is a change in
//! demand: the observations before it are dropped. A surge is confirmed by
//! the next clean minute, or dropped as a spike (saved tokens spent at once).
//! A move is made when the root is outside a band that starts at 5% and
//! widens with the observed noise, narrowing as observations at the same
//! factor accumulate; turning around takes 7%, and each further turn before
//! the factor has held for ten minutes 7% more.

/// The smallest change ever written.
pub const WRITE_BAND: f64 = 0.05;
/// The least change that turns the factor around.
const TURN_BAND: f64 = 0.07;
/// Clean minutes without a move after which the factor counts as settled.
const SETTLED: u32 = 10;
/// Each observation counts this much less than the next one when the
/// utilization at the latest factor is estimated: a change shows within a
/// few minutes, noise still averages out.
const RECENCY: f64 = 0.85;
/// A fall in demand this many minutes after a surge ends a spike.
const SPIKE: u32 = 2;
/// Observations kept since demand last changed.
const HISTORY: usize = 8;
/// Factors this close (log scale) are the same.
const SAME: f64 = 0.03;
/// A model is fitted only across factors this far apart (log scale).
const SPREAD: f64 = 0.09;
/// An observation this far (log scale) outside what the model family
/// explains is a change in demand; or `JUMP_NOISE` noise deviations if more.
const JUMP_FLOOR: f64 = 0.15;
const JUMP_NOISE: f64 = 4.0;
/// No minute-to-minute noise is assumed below this (log scale): a demand
/// that was steady for a while is not a promise that it stays so.
const NOISE_FLOOR: f64 = 0.02;
/// Noise assumed before any is measured (log scale).
const PRIOR_NOISE: f64 = 0.04;
/// Moves need the root this many noise deviations (of the mean) away.
const NOISE_BAND: f64 = 1.5;
/// Two observations in a row this many deviations off the model, the same
/// way, are a drift in demand.
const DRIFT: f64 = 2.0;
/// The share of use assumed to respond going up, before one is measured.
const PRIOR_RESPONSE: f64 = 0.5;

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
}

/// What the controller keeps between ticks for one (resource, limit).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Estimator {
    /// The factor in force.
    pub factor: f64,
    /// `(factor, utilization)` of the clean minutes since demand last changed.
    pub points: Vec<(f64, f64)>,
    /// `(a, b)` of `u(f) = a + b f`, once the points span different factors.
    pub model: Option<(f64, f64)>,
    /// Noise of utilization at one factor (log scale), exponentially weighted.
    pub noise: f64,
    /// The last observation's distance from the model (log scale).
    pub surprise: f64,
    /// The last move was down.
    pub fell: bool,
    /// Since a move down, moves up must not overshoot until a model is fitted.
    pub cautious: bool,
    /// There was a move since the start, the last change in demand or blind spell.
    pub moved: bool,
    /// Turns since demand last changed or the factor last settled.
    pub turns: u32,
    /// Clean minutes since the last move.
    pub quiet: u32,
    /// Minutes since the last surge (a jump up in demand).
    pub since_surge: u32,
    /// The only point is a surge, to be confirmed by the next clean minute.
    pub provisional: bool,
}

impl Default for Estimator {
    fn default() -> Self {
        Estimator {
            factor: 1.0,
            points: Vec::new(),
            model: None,
            noise: PRIOR_NOISE,
            surprise: 0.0,
            fell: false,
            cautious: false,
            moved: false,
            turns: 0,
            quiet: 0,
            since_surge: u32::MAX,
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

impl Estimator {
    /// Takes a complete minute and decides the factor; `max_factor >= 1`.
    pub fn observe(&mut self, obs: Observation, max_factor: f64) -> Decision {
        let max_factor = max_factor.max(1.0);
        let point = (obs.factor.clamp(1.0, max_factor), obs.utilization.max(0.0));
        self.since_surge = self.since_surge.saturating_add(1);
        if obs.mixed {
            return self.surge_only(point, max_factor);
        }
        self.take(point);
        let (f, u, weight) = self.anchor();
        let step = self.step_root(f, u).clamp(1.0, max_factor);
        // The room to move is judged by the farthest root the evidence
        // allows, no response, where the response is unknown or the factor is
        // too high (a response learnt before may have changed unseen); the
        // step goes to the safe root.
        let reach = if self.model.is_none() || f * u > 1.0 {
            root(u, 0.0).clamp(1.0, max_factor)
        } else {
            step
        };
        // An observation of an older factor (the controller's lag) can
        // confirm a step already taken, never push it further by itself.
        let fresh = (f / self.factor).ln().abs() < SAME;
        self.decide(step, reach, weight, fresh)
    }

    /// No canary sensed for two ticks: nothing is known, so the factor goes
    /// back to base and what was learnt about demand is dropped.
    pub fn blind(&mut self) -> Decision {
        let was = self.factor;
        *self = Estimator {
            noise: self.noise,
            fell: true,
            cautious: true,
            ..Estimator::default()
        };
        if was > 1.0 {
            Decision::Move(1.0)
        } else {
            Decision::Hold
        }
    }

    /// Moves to `target` when it is outside the band.
    /// Moves to `target` when `reach`, the root as far as the evidence
    /// allows (on the same side), is outside the band; never by less than
    /// the write band, when the evidence is of the factor in force (`fresh`).
    fn decide(&mut self, target: f64, reach: f64, weight: f64, fresh: bool) -> Decision {
        let mut band = WRITE_BAND.max(NOISE_BAND * self.noise / weight.sqrt());
        let turning = self.moved && (reach < self.factor) != self.fell;
        if turning {
            band = band.max(TURN_BAND * f64::from(1 + self.turns));
        }
        let least = WRITE_BAND.ln_1p();
        let short = (target / self.factor).ln().abs() < least;
        let target = if short {
            let nudge = if reach > self.factor { least } else { -least };
            (self.factor.ln() + nudge).exp()
        } else {
            target
        };
        if (reach / self.factor).ln().abs() <= band.ln_1p() || (short && !fresh) {
            self.quiet += 1;
            if self.quiet >= SETTLED {
                self.turns = 0;
            }
            return Decision::Hold;
        }
        self.quiet = 0;
        self.moved = true;
        self.turns += u32::from(turning);
        self.fell = target < self.factor;
        self.cautious |= self.fell;
        self.factor = target;
        Decision::Move(target)
    }

    /// A minute under two factors: a jump up in demand moves down at once, a
    /// full step from the factor now in force (use, partly at an older and
    /// higher factor, can only overstate what the new one lets through); a
    /// jump down drops the history and moves up as if all of use responded,
    /// from the lower of the two factors, which cannot overshoot; anything
    /// else waits for a clean minute.
    fn surge_only(&mut self, point: (f64, f64), max_factor: f64) -> Decision {
        let Some((low, high)) = self.explained(point.0) else {
            return Decision::Hold;
        };
        if (low..=high).contains(&point.1) {
            return Decision::Hold;
        }
        let (f, u) = (point.0.min(self.factor), point.1);
        let surge = u > high;
        self.new_step(surge);
        self.forget();
        let target = if surge {
            root(u, 0.0)
        } else {
            root(0.0, u / f)
        };
        let target = target.clamp(1.0, max_factor);
        if surge == (target < self.factor) {
            self.decide(target, target, 1.0, true)
        } else {
            Decision::Hold
        }
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

    /// Adds a clean observation, or restarts the history when demand changed.
    fn take(&mut self, point: (f64, f64)) {
        let Some((low, high)) = self.explained(point.0) else {
            self.points.push(point);
            return;
        };
        if std::mem::take(&mut self.provisional) {
            // A surge that did not last at the lower factor was a spike, or
            // use that responds: either way not a point to fit through.
            let surge = self.points[self.points.len() - 1].1;
            if log(surge) - log(point.1) > self.margin() {
                self.restart(vec![point]);
                return;
            }
        }
        let predicted = self.predict(point.0);
        let surprise = log(point.1) - log(predicted);
        let drift = DRIFT * self.noise;
        if point.1 < low || point.1 > high {
            self.new_step(point.1 > high);
            self.restart(vec![point]);
            self.provisional = point.1 > high;
        } else if surprise.abs() > drift
            && self.surprise.abs() > drift
            && surprise.signum() == self.surprise.signum()
        {
            let last = *self.points.last().expect("explained() found points");
            self.restart(vec![last, point]);
        } else {
            self.points.push(point);
            if self.points.len() > HISTORY {
                self.points.remove(0);
            }
            self.learn();
            self.surprise = surprise;
        }
    }

    /// Demand jumped: a new step, whose first move is no turn; unless it is
    /// the end of a spike (a fall right after a surge), which belongs to it.
    fn new_step(&mut self, surge: bool) {
        if surge || self.since_surge > SPIKE {
            self.moved = false;
            self.turns = 0;
        }
        if surge {
            self.since_surge = 0;
        }
    }

    fn forget(&mut self) {
        self.points.clear();
        self.model = None;
        self.surprise = 0.0;
    }

    /// Restarts from `points`: what was learnt about the response to the
    /// factor may not hold for the demand that changed.
    fn restart(&mut self, points: Vec<(f64, f64)>) {
        self.forget();
        self.points = points;
        self.learn();
    }

    /// Refits the model (weighted least squares, `a, b >= 0`) and the noise
    /// (the spread of utilization at the latest factor).
    fn learn(&mut self) {
        let (low, high) = self
            .points
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
                (l.min(p.0.ln()), h.max(p.0.ln()))
            });
        if high - low >= SPREAD {
            self.model = Some(fit(&self.points, self.noise));
            self.cautious = false;
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
        let recency = RECENCY;
        let (mut sum, mut weights) = (0.0, 0.0);
        for (age, &(f, u)) in self.points.iter().rev().enumerate() {
            let near = (f / f_last).ln();
            let weight = if self.model.is_some() {
                1.0 / (1.0 + (near / SPREAD).powi(2))
            } else if near.abs() < SAME {
                1.0
            } else {
                0.0
            } * recency.powi(age as i32);
            sum += weight * (u + b * (f_last - f));
            weights += weight;
        }
        (f_last, (sum / weights).max(0.0), weights)
    }

    /// The root to step to from `(f, u)`: the fitted model's, re-anchored
    /// there; or before one, the safe prior's for the direction of the step.
    fn step_root(&self, f: f64, u: f64) -> f64 {
        let b = match self.model {
            Some((_, b)) => b,
            None if f * u >= 1.0 => 0.0,
            None if self.cautious => u / f,
            None => PRIOR_RESPONSE * u / f,
        };
        let (a, b) = through(f, u, b);
        root(a, b)
    }
}

/// Least squares of utilization on the factor, within `a, b >= 0`. A
/// response within noise of none is taken as none: extrapolated to a larger
/// factor, a response that is only noise would hold the factor back.
fn fit(points: &[(f64, f64)], noise: f64) -> (f64, f64) {
    let n = points.len() as f64;
    let mean_f = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_u = points.iter().map(|p| p.1).sum::<f64>() / n;
    let cov: f64 = points.iter().map(|p| (p.0 - mean_f) * (p.1 - mean_u)).sum();
    let var: f64 = points.iter().map(|p| (p.0 - mean_f).powi(2)).sum();
    let b = if var > 0.0 { (cov / var).max(0.0) } else { 0.0 };
    // Shrunk by one standard error of the slope.
    let standard_error = noise * mean_u / var.sqrt();
    let b = (b - standard_error).max(0.0);
    if mean_u - b * mean_f >= 0.0 {
        return (mean_u - b * mean_f, b);
    }
    // Through the origin: all of use responds.
    let uf: f64 = points.iter().map(|p| p.0 * p.1).sum();
    let ff: f64 = points.iter().map(|p| p.0 * p.0).sum();
    (0.0, uf / ff)
}

/// `(a, b)` with slope `b` through `(f, u)`, within `a, b >= 0`.
fn through(f: f64, u: f64, b: f64) -> (f64, f64) {
    let b = b.clamp(0.0, u / f);
    (u - b * f, b)
}

/// The positive root of `f (a + b f) = 1`; infinite when nothing is used.
fn root(a: f64, b: f64) -> f64 {
    let (a, b) = (a.max(0.0), b.max(0.0));
    let f = if b <= f64::EPSILON {
        if a <= f64::EPSILON {
            f64::INFINITY
        } else {
            1.0 / a
        }
    } else {
        (-a + (a * a + 4.0 * b).sqrt()) / (2.0 * b)
    };
    if f.is_nan() { 1.0 } else { f }
}

/// A log that treats an idle minute as very low, not minus infinity.
fn log(utilization: f64) -> f64 {
    utilization.max(1e-6).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(demand: impl Fn(f64) -> f64, ticks: usize) -> Vec<f64> {
        let mut e = Estimator::default();
        (0..ticks)
            .map(|_| {
                let f = e.factor;
                e.observe(
                    Observation {
                        utilization: demand(f),
                        factor: f,
                        mixed: false,
                    },
                    10.0,
                );
                e.factor
            })
            .collect()
    }

    #[test]
    fn unresponsive_demand_settles_at_one_over_utilization() {
        let path = run(|_| 0.2, 4);
        assert!((path[1] - 5.0).abs() < 0.05, "{path:?}");
        assert_eq!(path[2], path[3]);
    }

    #[test]
    fn demand_that_takes_all_settles_at_the_square_root() {
        let path = run(|f| 0.2 * f, 5);
        let fixed = 5f64.sqrt();
        assert!((path[1] - fixed).abs() / fixed < 0.02, "{path:?}");
        assert_eq!(path[3], path[4]);
    }

    #[test]
    fn idle_goes_to_the_maximum_and_overload_to_one() {
        assert!((run(|_| 0.0, 1)[0] - 10.0).abs() < 1e-9);
        assert_eq!(run(|_| 1.5, 1)[0], 1.0);
    }

    #[test]
    fn a_surge_is_followed_down_at_once() {
        let mut e = Estimator::default();
        for _ in 0..3 {
            let f = e.factor;
            e.observe(
                Observation {
                    utilization: 0.2,
                    factor: f,
                    mixed: false,
                },
                10.0,
            );
        }
        assert!((e.factor - 5.0).abs() < 0.05);
        let decision = e.observe(
            Observation {
                utilization: 1.5,
                factor: e.factor,
                mixed: false,
            },
            10.0,
        );
        assert_eq!(decision, Decision::Move(1.0));
    }
}
