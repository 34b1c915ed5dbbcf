//! The five-field cron patterns the client's compact encoding can hold:
//! validation, the values a field matches, and the encoding of the fields.

pub(super) const FIELD_TAGS: [char; 5] = ['m', 'h', 'D', 'M', 'w'];
/// Value ranges of `m h D M w`; weekday 7 is Sunday as well as 0.
pub(super) const BOUNDS: [(u32, u32); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)];
const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Validates a five-field cron pattern: numbers, `*`, ranges, steps and
/// lists, with month and weekday names; nothing the compact encoding cannot
/// hold (seconds fields, `L`, `W`, `#`, `?`, `@daily`).
pub fn check_cron(cron: &str) -> Result<(), String> {
    let fields: Vec<&str> = cron.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "invalid cron expression '{cron}': exactly 5 fields are required \
             (minute hour day-of-month month day-of-week)"
        ));
    }
    let bounds = BOUNDS;
    let names = ["minute", "hour", "day-of-month", "month", "day-of-week"];
    for (i, field) in fields.iter().enumerate() {
        check_field(field, bounds[i], i).map_err(|why| {
            format!(
                "invalid cron expression '{cron}': {} field: {why}",
                names[i]
            )
        })?;
    }
    // With the weekday unrestricted, the day of the month alone decides, and
    // it must exist in at least one of the months.
    if fields[4] == "*" {
        let days = expand(fields[2], bounds[2], 2);
        let months = expand(fields[3], bounds[3], 3);
        const LENGTHS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        let possible = days
            .iter()
            .any(|d| months.iter().any(|m| *d <= LENGTHS[*m as usize - 1]));
        if !possible {
            return Err(format!(
                "invalid cron expression '{cron}': that day of the month never occurs in those months"
            ));
        }
    }
    Ok(())
}

/// The values a validated field matches.
pub(super) fn expand(field: &str, (lo, hi): (u32, u32), index: usize) -> Vec<u32> {
    let mut out = Vec::new();
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, step.parse().unwrap_or(1)),
            None => (item, 1),
        };
        let (start, end) = match range.split_once('-') {
            _ if range == "*" => (lo, hi),
            Some((a, b)) => (
                value(a, (lo, hi), index).unwrap_or(lo),
                value(b, (lo, hi), index).unwrap_or(hi),
            ),
            None => {
                let v = value(range, (lo, hi), index).unwrap_or(lo);
                (v, if step > 1 { hi } else { v })
            }
        };
        out.extend((start..=end).step_by(step.max(1) as usize));
    }
    out
}

fn value(text: &str, (lo, hi): (u32, u32), field: usize) -> Result<u32, String> {
    let upper = text.to_ascii_uppercase();
    let named = match field {
        3 => MONTHS
            .iter()
            .position(|m| *m == upper)
            .map(|i| i as u32 + 1),
        4 => DAYS.iter().position(|d| *d == upper).map(|i| i as u32),
        _ => None,
    };
    let number = match named {
        Some(n) => n,
        None => text
            .parse::<u32>()
            .ok()
            .filter(|_| text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("'{text}' is not a number"))?,
    };
    if number < lo || number > hi {
        return Err(format!("{number} is outside {lo}-{hi}"));
    }
    Ok(number)
}

fn check_field(field: &str, bounds: (u32, u32), index: usize) -> Result<(), String> {
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, Some(step)),
            None => (item, None),
        };
        if let Some(step) = step {
            let step: u32 = step
                .parse()
                .map_err(|_| format!("step '{step}' is not a number"))?;
            if step == 0 {
                return Err("a step must be positive".into());
            }
        }
        if range == "*" {
            continue;
        }
        match range.split_once('-') {
            Some((start, end)) => {
                let (start, end) = (value(start, bounds, index)?, value(end, bounds, index)?);
                if start > end {
                    return Err(format!("range '{range}' runs backwards"));
                }
            }
            None => {
                value(range, bounds, index)?;
            }
        }
    }
    Ok(())
}

fn names_to_numbers(spec: &str, table: &[&str], first: usize) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if !word.is_empty() {
            let upper = word.to_ascii_uppercase();
            match table.iter().position(|n| *n == upper) {
                Some(i) => out.push_str(&(i + first).to_string()),
                None => out.push_str(word),
            }
            word.clear();
        }
    };
    for c in spec.chars() {
        if c.is_ascii_alphabetic() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Sunday is `7` standing alone (as `0` or `SUN`) and `0` inside a range or
/// step, the client's canonical spelling.
fn weekday_item(item: &str) -> String {
    let upper = item.to_ascii_uppercase();
    if let Some(i) = DAYS.iter().position(|d| *d == upper) {
        return if i == 0 { "7".into() } else { i.to_string() };
    }
    if item == "0" {
        return "7".into();
    }
    names_to_numbers(item, &DAYS, 0)
}

pub(super) fn encode_cron(cron: &str) -> String {
    let mut out = String::new();
    for (tag, spec) in FIELD_TAGS.iter().zip(cron.split_whitespace()) {
        let encoded = match tag {
            'w' => spec
                .split(',')
                .map(weekday_item)
                .collect::<Vec<_>>()
                .join(","),
            'M' => names_to_numbers(spec, &MONTHS, 1),
            _ => spec.to_owned(),
        };
        if encoded != "*" {
            out.push(*tag);
            out.push_str(&encoded);
        }
    }
    out
}
