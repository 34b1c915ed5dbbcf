//! Client-chosen text (keys, ids, names) and messages as errors and log
//! lines show them: bounded, cut on a character. Its own module so that
//! every other one may use it without importing `keys`.

/// The start of `text`, at most `max_bytes` long and cut on a character:
/// a key in a log line or an error, where a key may be 2 KB.
pub fn clip(text: &str, max_bytes: usize) -> &str {
    let end = (0..=max_bytes.min(text.len()))
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    &text[..end]
}

/// The most of a key (or of any name a client chose: an entity id, a
/// resource, a namespace) an error or a log line shows.
pub const KEY_SHOWN_BYTES: usize = 160;
/// The most of a message (DynamoDB's, the SDK's, the twin's) an error shows.
pub const MESSAGE_SHOWN_BYTES: usize = 512;

/// `text` as an error or a log line shows it: whole up to `max_bytes`, else
/// its start, cut on a character, and how much was left out. The one place
/// client-chosen text is bounded before we print it.
pub fn shown(text: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
    let start = clip(text, max_bytes);
    if start.len() == text.len() {
        return std::borrow::Cow::Borrowed(text);
    }
    let more = text.len() - start.len();
    std::borrow::Cow::Owned(format!("{start}… ({more} more bytes)"))
}
