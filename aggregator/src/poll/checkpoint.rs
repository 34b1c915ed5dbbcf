//! The poller's position per stream shard, kept in a file that a crash can
//! leave old but never half written.

use crate::poll::PollError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use zae_table::SequenceNumber;

/// Position per stream shard: the last record whose effects are all written.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Checkpoint {
    pub stream_arn: Option<String>,
    pub shards: BTreeMap<String, String>,
    /// Closed shards read to their end: never read again, and their
    /// children may start.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub finished: BTreeSet<String>,
}

fn checkpoint_error(path: &Path, e: impl std::fmt::Display) -> PollError {
    PollError::Checkpoint {
        path: path.into(),
        message: e.to_string(),
    }
}

impl Checkpoint {
    pub fn load(path: &Path) -> Result<Checkpoint, PollError> {
        match std::fs::read_to_string(path) {
            Ok(text) if text.trim().is_empty() => Ok(Checkpoint::default()),
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| checkpoint_error(path, format!("not a checkpoint: {e}"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Checkpoint::default()),
            Err(e) => Err(checkpoint_error(path, e)),
        }
    }

    /// Writes a new file beside the old one under a name no other writer
    /// uses, syncs it, renames it over the old, and syncs the directory: a
    /// crash leaves either checkpoint whole, and a second poller on the same
    /// file cannot interleave its bytes with ours.
    pub fn save(&self, path: &Path) -> Result<(), PollError> {
        let err = |e: std::io::Error| checkpoint_error(path, e);
        let text = serde_json::to_vec_pretty(self).map_err(|e| checkpoint_error(path, e))?;
        let tmp = unique_sibling(path);
        let written = (|| {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            file.write_all(&text)?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.map_err(err)?;
        sync_directory(path).map_err(err)
    }

    pub fn position(&self, shard: &str) -> Option<SequenceNumber> {
        self.shards
            .get(shard)
            .and_then(|s| SequenceNumber::parse(s).ok())
    }

    pub fn advance(&mut self, shard: &str, to: &SequenceNumber) {
        self.shards.insert(shard.into(), to.as_stream().into());
    }

    /// Forgets finished shards the stream no longer lists (trimmed after
    /// 24 hours), so the file does not grow for ever.
    pub fn forget_gone(&mut self, listed: &BTreeSet<&str>) {
        let gone: Vec<String> = self
            .finished
            .iter()
            .filter(|id| !listed.contains(id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            self.finished.remove(&id);
            self.shards.remove(&id);
        }
    }
}

fn unique_sibling(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    path.with_file_name(name)
}

/// The rename is durable only once the directory entry is on disk.
fn sync_directory(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}
