//! Our reading of stored schedules against the 0.17.0 client's own code
//! (`tests/harness/schedule_oracle.py`), over generated cron patterns,
//! timezones and instants: the same patterns accepted, the same compact
//! encoding, the same decode, and at every instant the same parameters in
//! force, the same latest reset edge and the same next boundary. The refill
//! pass must reach the client's verdict on every bucket; a disagreement
//! here is a bucket refilled at the wrong rate or reset at the wrong time.

use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};
use zae_table::schedule::{
    ScheduleEntry, check_cron, decode_params, decode_resets, effective_params, encode,
    encode_reset, next_boundary, prev_reset_edge, timezone,
};
use zae_test_support::{fuzz_cases, harness};

const ZONES: [&str; 7] = [
    "UTC",
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Santiago",
    "Pacific/Chatham",
];
/// Instants near daylight-saving changes in 2026 (UTC ms), where unit
/// lengths and wall-clock gaps make the searches interesting.
const SHIFTS: [i64; 8] = [
    1_772_953_200_000, // 2026-03-08 07:00 New York springs forward
    1_793_512_800_000, // 2026-11-01 06:00 New York falls back
    1_774_746_000_000, // 2026-03-29 01:00 London
    1_792_890_000_000, // 2026-10-25 01:00 London
    1_775_314_800_000, // 2026-04-04 15:00 Lord Howe (half an hour)
    1_775_358_000_000, // 2026-04-05 03:00 Santiago (at midnight)
    1_788_667_200_000, // 2026-09-06 04:00 Santiago
    1_775_311_200_000, // 2026-04-04 14:00 Chatham
];

struct Gen(fastrand::Rng);

impl Gen {
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.0.usize(..items.len())]
    }

    fn number(&mut self, lo: u32, hi: u32) -> String {
        // Now and then one past the range: the client must refuse it too.
        if self.0.u8(..40) == 0 {
            return (hi + 1).to_string();
        }
        self.0.u32(lo..=hi).to_string()
    }

    fn name(&mut self, field: usize) -> Option<String> {
        let names: &[&str] = match field {
            3 => &["jan", "FEB", "Mar", "apr", "JUN", "sep", "DEC"],
            4 => &["SUN", "mon", "Tue", "wed", "FRI", "sat"],
            _ => return None,
        };
        Some(self.pick(names).to_owned())
    }

    fn value(&mut self, field: usize, (lo, hi): (u32, u32)) -> String {
        match self.name(field) {
            Some(name) if self.0.bool() => name,
            _ => self.number(lo, hi),
        }
    }

    fn term(&mut self, field: usize, bounds: (u32, u32)) -> String {
        let (lo, hi) = bounds;
        match self.0.u8(..20) {
            0..=5 => self.value(field, bounds),
            6..=9 => {
                let a = self.0.u32(lo..=hi);
                let b = if self.0.u8(..15) == 0 {
                    a.saturating_sub(1).max(lo)
                } else {
                    self.0.u32(a..=hi)
                };
                format!("{a}-{b}")
            }
            10..=11 => format!("*/{}", self.0.u32(1..=hi.max(2))),
            12 => format!("{}/{}", self.value(field, bounds), self.0.u32(1..=9)),
            13 => {
                let a = self.0.u32(lo..=hi);
                format!("{a}-{}/{}", self.0.u32(a..=hi), self.0.u32(1..=5))
            }
            14 => self
                .pick(&["L", "5#2", "?", "1W", "*/0", "", "LW", "2L"])
                .to_owned(),
            _ => "*".to_owned(),
        }
    }

    /// A field: mostly one term, sometimes a list.
    fn field(&mut self, field: usize) -> String {
        const BOUNDS: [(u32, u32); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)];
        // Fine fields are usually pinned or starred, so that windows and
        // edges land within reach.
        let starred = [0.1, 0.4, 0.7, 0.8, 0.6][field];
        if self.0.f32() < starred {
            return "*".into();
        }
        let terms = if self.0.u8(..5) == 0 {
            self.0.usize(2..=3)
        } else {
            1
        };
        (0..terms)
            .map(|_| self.term(field, BOUNDS[field]))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn cron(&mut self) -> String {
        (0..5).map(|f| self.field(f)).collect::<Vec<_>>().join(" ")
    }

    fn modifier(&mut self) -> Value {
        if self.0.bool() {
            let scale = [0.5, 2.0, 2.3, 0.0025, 1.5, 10.0, 0.001, 1000.0];
            return json!({"scale": scale[self.0.usize(..scale.len())]});
        }
        let mut m = serde_json::Map::new();
        for (key, hi) in [
            ("capacity", 5000),
            ("refill_amount", 500),
            ("refill_period_seconds", 3600),
        ] {
            if self.0.bool() || m.is_empty() && key == "refill_period_seconds" {
                m.insert(key.into(), json!(self.0.i64(1..=hi)));
            }
        }
        Value::Object(m)
    }

    fn instants(&mut self) -> Vec<i64> {
        const START_2025: i64 = 1_735_689_600_000;
        const YEARS_3: i64 = 3 * 365 * 86_400_000;
        (0..8)
            .map(|i| {
                if i % 2 == 0 {
                    START_2025 + self.0.i64(0..YEARS_3)
                } else {
                    SHIFTS[self.0.usize(..SHIFTS.len())] + self.0.i64(-3 * 3_600_000..3 * 3_600_000)
                }
            })
            .collect()
    }

    fn schedule(&mut self) -> Value {
        let params: Vec<Value> = (0..self.0.usize(0..=3))
            .map(|_| {
                let mut m = self.modifier();
                m["cron"] = json!(self.cron());
                m
            })
            .collect();
        let resets: Vec<String> = (0..self.0.usize(0..=2)).map(|_| self.cron()).collect();
        json!({
            "tz": self.pick(&ZONES),
            "params": params,
            "resets": resets,
            "base": [self.0.i64(1..=100_000) * 1000, self.0.i64(0..=1000) * 1000, self.0.i64(1..=60) * 1000],
            "nows": self.instants(),
        })
    }

    fn raw(&mut self) -> String {
        let alphabet: Vec<char> = "mhDMwscap0123456789*/,-;_ +".chars().collect();
        let prefix = self.pick(&["1", "1", "1", "01", "2", "", "0"]);
        let len = self.0.usize(0..12);
        let body: String = (0..len)
            .map(|_| alphabet[self.0.usize(..alphabet.len())])
            .collect();
        format!("{prefix}{body}")
    }
}

fn oracle(request: &Value) -> Value {
    let mut child = Command::new(harness::python())
        .arg(harness::harness("schedule_oracle.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the oracle");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(request.to_string().as_bytes())
        .expect("write the request");
    let out = child.wait_with_output().expect("oracle output");
    assert!(out.status.success(), "the oracle failed");
    serde_json::from_slice(&out.stdout).expect("oracle JSON")
}

fn entry(spec: &Value, tz: &str) -> ScheduleEntry {
    ScheduleEntry {
        cron: spec["cron"].as_str().unwrap_or_default().to_owned(),
        tz: tz.to_owned(),
        scale: spec["scale"].as_f64(),
        capacity: spec["capacity"].as_i64(),
        refill_amount: spec["refill_amount"].as_i64(),
        refill_period_seconds: spec["refill_period_seconds"].as_i64(),
    }
}

/// Compares one schedule with the client's answer; returns whether the
/// client accepted every pattern (and so evaluated it).
fn compare(schedule: &Value, answer: &Value) -> bool {
    let tz_name = schedule["tz"].as_str().unwrap();
    let params: Vec<ScheduleEntry> = schedule["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| entry(p, tz_name))
        .collect();
    let resets: Vec<ScheduleEntry> = schedule["resets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| entry(&json!({"cron": c}), tz_name))
        .collect();
    let accepted: Vec<bool> = params
        .iter()
        .chain(&resets)
        .map(|e| check_cron(&e.cron).is_ok())
        .collect();
    let theirs: Vec<bool> = serde_json::from_value(answer["accepted"].clone()).unwrap();
    assert_eq!(accepted, theirs, "which crons are accepted: {schedule}");
    if !theirs.iter().all(|a| *a) {
        return false;
    }
    let (sched, rsched) = (encode(&params), encode_reset(&resets));
    assert_eq!(
        json!([sched, rsched]),
        json!([answer["sched"], answer["rsched"]]),
        "encoding of {schedule}"
    );
    let tz = timezone(Some(tz_name)).unwrap();
    let decoded = (decode_params(&sched), decode_resets(&rsched));
    let (Ok(entries), Ok(patterns)) = decoded else {
        assert!(
            answer["evals"].is_null(),
            "we cannot decode {sched:?} / {rsched:?}, the client can: {decoded:?}"
        );
        return false;
    };
    assert!(
        !answer["evals"].is_null(),
        "the client cannot decode {sched:?} / {rsched:?}, we can"
    );
    let base: (i64, i64, i64) = serde_json::from_value(schedule["base"].clone()).unwrap();
    for (now, theirs) in schedule["nows"]
        .as_array()
        .unwrap()
        .iter()
        .zip(answer["evals"].as_array().unwrap())
    {
        let now = now.as_i64().unwrap();
        let (cp, ra, rp) = effective_params(base, &entries, tz, now);
        let ours = json!([
            cp,
            ra,
            rp,
            prev_reset_edge(&patterns, tz, now),
            next_boundary(&entries, &patterns, tz, now)
        ]);
        assert_eq!(
            &ours, theirs,
            "at {now} in {tz_name}, sched {sched:?} rsched {rsched:?} (cp ra rp edge boundary)"
        );
    }
    true
}

#[test]
fn schedules_read_as_the_client_reads_them() {
    let mut generator = Gen(fastrand::Rng::with_seed(0x5ced));
    let n = fuzz_cases(400) as usize;
    let schedules: Vec<Value> = (0..n).map(|_| generator.schedule()).collect();
    let raw: Vec<String> = (0..n * 4).map(|_| generator.raw()).collect();
    let answer = oracle(&json!({"schedules": schedules, "raw": raw}));
    let evaluated = schedules
        .iter()
        .zip(answer["schedules"].as_array().unwrap())
        .filter(|(s, a)| compare(s, a))
        .count();
    assert!(
        evaluated * 3 > n,
        "too few generated schedules were valid: {evaluated} of {n}"
    );
    let mut decoded = 0;
    for (text, theirs) in raw.iter().zip(answer["raw"].as_array().unwrap()) {
        let ours = json!([decode_params(text).is_ok(), decode_resets(text).is_ok()]);
        assert_eq!(
            &ours, theirs,
            "whether {text:?} decodes (as parameters, as resets)"
        );
        decoded += usize::from(ours[0].as_bool() == Some(true) || ours[1].as_bool() == Some(true));
    }
    assert!(decoded > 0, "no generated compact string was valid");
    eprintln!(
        "{evaluated} of {n} schedules evaluated at 8 instants each; {decoded} of {} raw strings decode",
        raw.len()
    );
}
