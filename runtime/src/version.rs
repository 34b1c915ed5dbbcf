//! Which build this is, in the words every place that shows it uses: the
//! crates' version (Cargo.toml's, the one source) and the stamp the build
//! writes on a table's version record (`zae_table::registry`).

use std::sync::LazyLock;

/// The crates' version: the workspace's in Cargo.toml.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The `lambda_version` this build stamps: `0.17.0+rust.<VERSION>`.
pub const TABLE_STAMP: &str = zae_table::registry::LAMBDA_VERSION_STAMP;
/// The target of the version line, which the log filter always lets through.
pub const TARGET: &str = "zae_runtime::version";

static LONG: LazyLock<String> = LazyLock::new(|| format!("{VERSION} (table stamp {TABLE_STAMP})"));

/// What `--version` prints after the binary's name.
pub fn long() -> &'static str {
    LONG.as_str()
}

/// The first log line of a binary, right after `telemetry::init`: its name,
/// version and table stamp, as fields and in the message.
pub fn announce(binary: &str) {
    tracing::info!(
        target: TARGET,
        binary,
        version = VERSION,
        table_stamp = TABLE_STAMP,
        "{binary} {VERSION} starting (table stamp {TABLE_STAMP})"
    );
}

/// The arguments of a Lambda bootstrap that has no command line of its own:
/// none runs the function (`Ok(None)`); `--version` or `-V` alone asks for
/// the version line (`Ok(Some(line))`); anything else is refused, named.
pub fn bootstrap_args(binary: &str, args: &[String]) -> Result<Option<String>, String> {
    match args {
        [] => Ok(None),
        [flag] if flag == "--version" || flag == "-V" => Ok(Some(format!("{binary} {}", long()))),
        [first, ..] => Err(format!(
            "{binary}: unexpected argument {first:?}: this is a Lambda bootstrap, \
             which takes none but --version"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The lines `announce` logs through the subscriber `telemetry::init`
    /// installs, at `level`.
    fn announced(level: &str) -> Vec<serde_json::Value> {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = crate::telemetry::subscriber(level, move || writer.clone());
        tracing::subscriber::with_default(subscriber, || announce("aggregator"));
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The line names the build and its table stamp, as JSON fields a log
    /// query can select and in the message; at `warn` and `error` too.
    #[test]
    fn the_version_line_names_the_build_and_its_table_stamp_at_every_level() {
        for level in ["info", "warn", "error"] {
            let lines = announced(level);
            assert_eq!(lines.len(), 1, "{level}: {lines:?}");
            let line = &lines[0];
            assert_eq!(line["level"], "INFO", "{line}");
            assert_eq!(line["binary"], "aggregator", "{line}");
            assert_eq!(line["version"], env!("CARGO_PKG_VERSION"), "{line}");
            let stamp = format!("0.17.0+rust.{}", env!("CARGO_PKG_VERSION"));
            assert_eq!(line["table_stamp"], stamp.as_str(), "{line}");
            let message = line["message"].as_str().unwrap();
            assert_eq!(
                message,
                format!(
                    "aggregator {} starting (table stamp {stamp})",
                    env!("CARGO_PKG_VERSION")
                )
            );
        }
    }

    #[test]
    fn a_bootstrap_takes_no_argument_but_the_version_flag() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(bootstrap_args("b", &[]), Ok(None));
        let line = format!(
            "b {} (table stamp {TABLE_STAMP})",
            env!("CARGO_PKG_VERSION")
        );
        for flag in ["--version", "-V"] {
            assert_eq!(bootstrap_args("b", &args(&[flag])), Ok(Some(line.clone())));
        }
        for bad in [&["poll"][..], &["--version", "x"], &["--help"]] {
            let err = bootstrap_args("b", &args(bad)).unwrap_err();
            assert!(err.contains(&format!("{:?}", bad[0])), "{err}");
        }
    }
}
