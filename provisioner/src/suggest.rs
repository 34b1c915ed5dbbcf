//! "Did you mean": the closest of a few known words to one that is not, for
//! manifest fields and namespace names.

/// The candidate most like `word`, when one is alike enough to be a typo
/// (Jaro-Winkler similarity of at least 0.8, the measure clap suggests flags by).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn a_typo_finds_its_word_and_a_stranger_finds_none() {
        let fields = ["capacity", "refill_amount", "refill_period", "soft"];
        assert_eq!(closest("capacty", fields), Some("capacity"));
        assert_eq!(closest("refil_amount", fields), Some("refill_amount"));
        assert_eq!(closest("burst", fields), None);
        assert_eq!(closest("defualt", ["default", "tenant-a"]), Some("default"));
    }
}
