//! Mapping keys as the YAML text spells them. YAML types a plain key such
//! as `0x1F`, `1e3` or `True` as a number or a boolean, and its text is then
//! lost: `0x1F` would name entity `31`, and `True:` beside `"true":` would
//! be one level declared twice. A second reading of the text takes every
//! key as written; a key whose typed reading spells it otherwise is refused
//! with its path, and the two readings must agree on every other key.

use super::problem::{Path, Problem};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, Visitor};
use std::collections::HashSet;
use std::fmt;
use yaml_serde::Value as Tree;

/// The shape of a document with its keys' text; scalars are not kept.
pub enum Raw {
    Map(Vec<(String, Raw)>),
    Seq(Vec<Raw>),
    Other,
}

/// The keys of `text` as written; `None` when a key is not a scalar (the
/// typed reading reports it).
pub fn read(text: &str) -> Option<Raw> {
    yaml_serde::from_str(text).ok()
}

/// Puts every scalar key of `tree` in its written text, reporting each key
/// YAML would have renamed and each text declared twice in one mapping.
pub fn keys_as_written(tree: &mut Tree, raw: &Raw, path: &Path, problems: &mut Vec<Problem>) {
    match (tree, raw) {
        (Tree::Mapping(map), Raw::Map(keys)) if map.len() == keys.len() => {
            let typed = std::mem::take(map);
            let mut seen = HashSet::new();
            for ((key, mut value), (text, raw)) in typed.into_iter().zip(keys) {
                let here = path.key(text);
                if let Some(read) = renamed(&key, text) {
                    problems.push(Problem::new(
                        &here,
                        format!("the key {text} is read by YAML as {read}; quote it ('{text}') to keep its text"),
                    ));
                }
                keys_as_written(&mut value, raw, &here, problems);
                if !seen.insert(text.clone()) {
                    problems.push(Problem::new(&here, "declared twice in one mapping"));
                    continue;
                }
                map.insert(Tree::String(text.clone()), value);
            }
        }
        (Tree::Sequence(items), Raw::Seq(raws)) => {
            for (i, (item, raw)) in items.iter_mut().zip(raws).enumerate() {
                keys_as_written(item, raw, &path.index(i), problems);
            }
        }
        (Tree::Tagged(tagged), raw) => keys_as_written(&mut tagged.value, raw, path, problems),
        _ => {}
    }
}

/// What YAML reads a key as, when that is not its text.
fn renamed(key: &Tree, text: &str) -> Option<String> {
    match key {
        Tree::Number(n) if n.to_string() != text => Some(format!("the number {n}")),
        Tree::Bool(b) if b.to_string() != text => Some(format!("the boolean {b}")),
        Tree::Null => Some("null".into()),
        _ => None,
    }
}

impl<'de> de::Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Raw, D::Error> {
        deserializer.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Raw, E> {
        Ok(Raw::Other)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Raw, E> {
        Ok(Raw::Other)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Raw, E> {
        Ok(Raw::Other)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Raw, E> {
        Ok(Raw::Other)
    }
    fn visit_str<E>(self, _: &str) -> Result<Raw, E> {
        Ok(Raw::Other)
    }
    fn visit_unit<E>(self) -> Result<Raw, E> {
        Ok(Raw::Other)
    }
    fn visit_none<E>(self) -> Result<Raw, E> {
        Ok(Raw::Other)
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Raw, D::Error> {
        deserializer.deserialize_any(RawVisitor)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Raw::Seq(items))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key_seed(KeyText)? {
            entries.push((key, map.next_value()?));
        }
        Ok(Raw::Map(entries))
    }
    // A tagged value (`!Tag value`): its content, as the typed reading keeps it.
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Raw, A::Error> {
        let (IgnoredAny, content) = data.variant()?;
        de::VariantAccess::newtype_variant(content)
    }
}

/// A key's text as written: the YAML reader hands any scalar to
/// `deserialize_str` untyped.
struct KeyText;

impl<'de> DeserializeSeed<'de> for KeyText {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        struct Text;
        impl Visitor<'_> for Text {
            type Value = String;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a scalar key")
            }
            fn visit_str<E>(self, text: &str) -> Result<String, E> {
                Ok(text.to_owned())
            }
        }
        deserializer.deserialize_str(Text)
    }
}
