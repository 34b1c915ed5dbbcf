//! What `zae-limits` says on stderr while it works: every warning (from any
//! part of the provisioner or the SDK) and, unless `--no-progress`, a line
//! per phase of an apply (events with target [`PROGRESS`]). On a terminal the
//! fan-out phase is one line redrawn in place, with a bar; elsewhere (a CI
//! log) it prints at every tenth of the way.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use zae_provisioner::apply::PROGRESS;

pub struct Progress {
    show: bool,
    terminal: bool,
    /// A redrawn line is open on the terminal (the next line must end it).
    open: Mutex<bool>,
}

/// Installs the stderr reporter; `show` is false under `--no-progress`.
pub fn init(show: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    let layer = Progress {
        show,
        terminal: std::io::stderr().is_terminal(),
        open: Mutex::new(false),
    };
    let subscriber = tracing_subscriber::registry().with(layer);
    // A second install (tests) keeps the first.
    let _ = tracing::subscriber::set_global_default(subscriber);
}

#[derive(Default)]
struct Fields {
    message: String,
    phase: Option<String>,
    done: Option<u64>,
    total: Option<u64>,
    rest: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "phase" => self.phase = Some(format!("{value:?}").trim_matches('"').to_owned()),
            name => {
                let _ = write!(self.rest, " {name}={value:?}");
            }
        }
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "done" => self.done = Some(value),
            "total" => self.total = Some(value),
            _ => self.record_debug(field, &value),
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record_u64(field, u64::try_from(value).unwrap_or(0));
    }
}

impl<S: Subscriber> Layer<S> for Progress {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let progress = meta.target() == PROGRESS;
        if !(progress && self.show) && *meta.level() > Level::WARN {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let mut err = std::io::stderr().lock();
        if progress {
            let (line, redraw) = self.render(&fields);
            let Some(line) = line else { return };
            let end = if *open && !redraw { "\n" } else { "" };
            if redraw {
                let _ = write!(err, "\r{line}\x1b[K");
            } else {
                let _ = writeln!(err, "{end}{line}");
            }
            *open = redraw;
            return;
        }
        if std::mem::take(&mut *open) {
            let _ = writeln!(err);
        }
        let level = if *meta.level() == Level::ERROR {
            "error"
        } else {
            "warning"
        };
        let _ = writeln!(err, "{level}: {}{}", fields.message, fields.rest);
    }
}

impl Progress {
    /// The line to print, and whether it is redrawn in place.
    fn render(&self, f: &Fields) -> (Option<String>, bool) {
        let phase = f.phase.as_deref().unwrap_or("working");
        match (f.done, f.total) {
            (Some(done), Some(total)) if total > 0 => {
                let finished = done >= total;
                if self.terminal {
                    (
                        Some(format!("{phase}: {} {done}/{total}", bar(done, total))),
                        !finished,
                    )
                } else if finished || (done * 10 / total) != ((done - 1) * 10 / total) {
                    (Some(format!("{phase}: {done}/{total}")), false)
                } else {
                    (None, false)
                }
            }
            _ => (Some(format!("{phase}: {}{}", f.message, f.rest)), false),
        }
    }
}

fn bar(done: u64, total: u64) -> String {
    const WIDTH: u64 = 24;
    let filled = (done.min(total) * WIDTH / total) as usize;
    format!(
        "[{}{}]",
        "#".repeat(filled),
        ".".repeat(WIDTH as usize - filled)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(done: u64, total: u64) -> Fields {
        Fields {
            phase: Some("fan-out".into()),
            done: Some(done),
            total: Some(total),
            ..Fields::default()
        }
    }

    #[test]
    fn a_log_gets_a_line_per_tenth_and_a_terminal_one_redrawn_line() {
        let log = Progress {
            show: true,
            terminal: false,
            open: Mutex::new(false),
        };
        let printed: Vec<u64> = (1..=100)
            .filter(|d| log.render(&fields(*d, 100)).0.is_some())
            .collect();
        assert_eq!(printed, vec![10, 20, 30, 40, 50, 60, 70, 80, 90, 100]);
        let tty = Progress {
            terminal: true,
            ..log
        };
        let (line, redraw) = tty.render(&fields(3, 4));
        assert_eq!(
            line.as_deref(),
            Some("fan-out: [##################......] 3/4")
        );
        assert!(redraw);
        assert!(!tty.render(&fields(4, 4)).1, "the last one ends the line");
    }
}
