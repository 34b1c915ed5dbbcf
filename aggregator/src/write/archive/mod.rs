//! The audit archive: audit items removed from the table go to S3 as gzip
//! JSON Lines, one object per namespace and day of a batch, at a key fixed by
//! the records it holds. Delivery is at least once: a write that fails after
//! its retries makes the batch fail from its earliest record, and a
//! redelivery rewrites the same objects (or, cut differently, writes lines
//! again, which the documented query drops by `event_id`).

use super::Aggregator;
use super::BatchOutcome;
use crate::plan::ArchiveSkip;
use futures::future::BoxFuture;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::Instant;
use zae_table::SequenceNumber;
use zae_table::archive::{Archived, object_key};
use zae_table::keys;
use zae_table::store::{Store, StoreError};

/// Where archive objects go: S3 in production, a map in tests.
pub trait Archive: Send + Sync {
    fn put<'a>(&'a self, key: &'a str, body: Vec<u8>) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// One object: its key, gzip body, the earliest record in it, and its lines.
pub struct Object {
    pub key: String,
    pub body: Vec<u8>,
    pub earliest: SequenceNumber,
    pub events: usize,
}

/// The batch's removed audit events, one object per (namespace, day).
pub fn objects(removed: &[(SequenceNumber, Archived)]) -> Vec<Object> {
    let mut groups: BTreeMap<(&str, chrono::NaiveDate), Vec<&(SequenceNumber, Archived)>> =
        BTreeMap::new();
    for entry in removed {
        groups
            .entry((&entry.1.namespace, entry.1.day))
            .or_default()
            .push(entry);
    }
    groups
        .into_iter()
        .map(|((namespace, day), mut entries)| {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let mut digest = Sha256::new();
            let mut lines = Vec::new();
            for (sequence, archived) in &entries {
                digest.update(sequence.padded().as_bytes());
                lines.extend(archived.line.to_string().into_bytes());
                lines.push(b'\n');
            }
            let digest: String = digest.finalize()[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let earliest = entries[0].0.clone();
            Object {
                key: object_key(namespace, day, earliest.as_stream(), &digest),
                body: gzip(&lines),
                earliest,
                events: entries.len(),
            }
        })
        .collect()
}

/// Gzip with a zero modification time, so the same lines give the same bytes.
fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

impl<S: Store> Aggregator<S> {
    /// The removals whose namespace the registry holds (its `#NSID#` entry,
    /// in any status: a deleted namespace's audit items still expire, and a
    /// purge removes that entry last). The others are skipped. A registry
    /// that cannot be read fails the batch from that namespace's earliest
    /// removal, for a retry.
    pub(super) async fn registered(
        &self,
        removed: &[(SequenceNumber, Archived)],
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) -> Vec<(SequenceNumber, Archived)> {
        let namespaces: BTreeSet<&str> =
            removed.iter().map(|(_, a)| a.namespace.as_str()).collect();
        let (mut known, mut unread) = (BTreeSet::new(), BTreeSet::new());
        for namespace in namespaces {
            let (pk, sk) = (keys::pk_registry(), keys::sk_namespace_id(namespace));
            let entry = self
                .retrying(deadline, || self.store.get(&pk, &sk, true))
                .await;
            match entry {
                Ok(Some(_)) => {
                    known.insert(namespace);
                }
                Ok(None) => {}
                Err(e) => {
                    let of_it = removed.iter().filter(|(_, a)| a.namespace == namespace);
                    if let Some(earliest) = of_it.map(|(s, _)| s.clone()).min() {
                        outcome.fail(&e, earliest);
                    }
                    unread.insert(namespace);
                }
            }
        }
        let mut kept = Vec::new();
        for (sequence, archived) in removed {
            if known.contains(archived.namespace.as_str()) {
                kept.push((sequence.clone(), archived.clone()));
            } else if !unread.contains(archived.namespace.as_str()) {
                outcome.skip_archive(ArchiveSkip {
                    sequence: sequence.clone(),
                    key: archived.key.clone(),
                    reason: "namespace id not in the table's registry".into(),
                    events: 1,
                });
            }
        }
        kept
    }

    pub(super) async fn write_object(
        &self,
        object: &Object,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        let Some(archive) = &self.archive else {
            return Ok(());
        };
        self.retrying(deadline, || archive.put(&object.key, object.body.clone()))
            .await
    }
}

pub mod s3;

#[cfg(test)]
mod tests;
