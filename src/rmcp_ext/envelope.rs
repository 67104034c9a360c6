//! The top level of one JSON-RPC message, read as it streams past without keeping it.
//!
//! An upstream answer too large to read must still end the call it answers, so the bridge has
//! to learn the answer's `id` from bytes it throws away. The `id` can be anywhere among the
//! top-level keys: rmcp and the Python SDK write it before `result`, the TypeScript SDK after
//! it, 16 MiB later. So every byte is fed through this small state machine (strings are
//! skipped with `memchr`), which keeps only the raw `id` value and which of `method`, `result`
//! and `error` it has seen, never the message.

use rmcp::model::RequestId;

/// The longest raw `id` value kept; a longer one is not an id the bridge sent.
const MAX_ID_BYTES: usize = 128;
/// The longest top-level key kept (the longest of interest is `method`).
const MAX_KEY_BYTES: usize = 8;

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Key {
    #[default]
    Other,
    Id,
    Method,
    Answer,
}

/// Streaming reader of a message's top-level keys. Feed it the bytes of one message (one
/// line, one SSE event), in as many pieces as they come; [`Envelope::reset`] before the next.
#[derive(Debug, Default)]
pub struct Envelope {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At depth 1, outside a string: the next string is a key.
    expect_key: bool,
    /// Collecting a top-level key (inside its quotes).
    in_key: bool,
    key: Vec<u8>,
    /// The key whose value is being read.
    current: Key,
    /// Collecting the raw `id` value.
    in_id: bool,
    id: Vec<u8>,
    id_done: bool,
    has_method: bool,
    has_answer: bool,
}

impl Envelope {
    pub fn reset(&mut self) {
        let (mut key, mut id) = (std::mem::take(&mut self.key), std::mem::take(&mut self.id));
        key.clear();
        id.clear();
        *self = Self {
            key,
            id,
            ..Self::default()
        };
    }

    pub fn feed(&mut self, mut bytes: &[u8]) {
        while let Some((&byte, rest)) = bytes.split_first() {
            if self.in_string && !self.in_key && !self.in_id && !self.escaped {
                // The bulk of a large message: string content, skipped fast.
                match memchr::memchr2(b'"', b'\\', bytes) {
                    Some(at) => {
                        self.string_byte(bytes[at]);
                        bytes = &bytes[at + 1..];
                    }
                    None => return,
                }
                continue;
            }
            if self.in_id {
                self.id_byte(byte);
            }
            if self.in_string {
                // A key's bytes, up to its closing quote (an escaped quote is one of them).
                let closing = byte == b'"' && !self.escaped;
                if self.in_key && !closing {
                    self.key_byte(byte);
                }
                self.string_byte(byte);
            } else {
                self.structure_byte(byte);
            }
            bytes = rest;
        }
    }

    /// The id of an answer (to a request the bridge sent), as soon as it is known: its `id`
    /// is read and a `result` or `error` key was seen, and no `method` so far. A request or a
    /// notification from the upstream, or junk, has none. (A well-formed message does not
    /// have both `method` and `result`; one that does may be taken for an answer.)
    pub fn response_id(&self) -> Option<RequestId> {
        (self.id_done && self.has_answer && !self.has_method).then(|| self.parsed_id())?
    }

    fn parsed_id(&self) -> Option<RequestId> {
        serde_json::from_slice(&self.id).ok()
    }

    fn string_byte(&mut self, byte: u8) {
        if self.escaped {
            self.escaped = false;
        } else if byte == b'\\' {
            self.escaped = true;
        } else if byte == b'"' {
            self.in_string = false;
            if self.in_key {
                self.in_key = false;
                self.current = match self.key.as_slice() {
                    b"id" => Key::Id,
                    b"method" => Key::Method,
                    b"result" | b"error" => Key::Answer,
                    _ => Key::Other,
                };
            }
        }
    }

    fn key_byte(&mut self, byte: u8) {
        if self.key.len() <= MAX_KEY_BYTES {
            self.key.push(byte);
        }
    }

    fn id_byte(&mut self, byte: u8) {
        let ends = !self.in_string && self.depth == 1 && matches!(byte, b',' | b'}');
        if ends {
            self.in_id = false;
            self.id_done = true;
            let trimmed = self.id.trim_ascii_end().len();
            self.id.truncate(trimmed);
        } else if self.id.len() < MAX_ID_BYTES {
            if !(self.id.is_empty() && byte.is_ascii_whitespace()) {
                self.id.push(byte);
            }
        } else {
            // Not an id the bridge sent: forget it.
            self.in_id = false;
            self.id.clear();
        }
    }

    fn structure_byte(&mut self, byte: u8) {
        match byte {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.in_key = true;
                    self.expect_key = false;
                    self.key.clear();
                }
            }
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
        if self.depth != 1 {
            return;
        }
        match byte {
            // The message's own opening brace, or the comma after a value: a key comes next.
            b'{' | b',' => self.expect_key = true,
            b':' => match self.current {
                Key::Id if !self.id_done => {
                    self.in_id = true;
                    self.id.clear();
                }
                Key::Method => self.has_method = true,
                Key::Answer => self.has_answer = true,
                _ => {}
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::NumberOrString;

    use super::*;

    type Seen = Option<RequestId>;

    fn seen_in_pieces(message: &str, piece: usize) -> Seen {
        let mut envelope = Envelope::default();
        for chunk in message.as_bytes().chunks(piece) {
            envelope.feed(chunk);
        }
        envelope.response_id()
    }

    fn seen(message: &str) -> Seen {
        let whole = seen_in_pieces(message, message.len().max(1));
        for piece in [1, 2, 3, 7] {
            assert_eq!(
                seen_in_pieces(message, piece),
                whole,
                "{message} in {piece}s"
            );
        }
        whole
    }

    fn number(n: i64) -> Seen {
        Some(NumberOrString::Number(n))
    }

    #[test]
    fn the_id_of_an_answer_is_found_before_or_after_the_result() {
        assert_eq!(
            seen(r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"x"}]}}"#),
            number(7)
        );
        assert_eq!(
            seen(r#"{"result":{"id":99,"nested":{"id":"no"}},"jsonrpc":"2.0","id":12}"#),
            number(12)
        );
        assert_eq!(
            seen(r#" { "id" : "a\"b" , "error" : {"code":-1,"message":"m"} } "#),
            Some(NumberOrString::String("a\"b".into()))
        );
    }

    #[test]
    fn strings_that_look_like_keys_are_content() {
        assert_eq!(
            seen(r#"{"result":{"text":"\"id\":5, \"method\":\"x\" \\"},"id":3,"jsonrpc":"2.0"}"#),
            number(3)
        );
        assert_eq!(
            seen(r#"{"jsonrpc":"2.0","result":["{\"id\":1}",{"id":2}],"id":4}"#),
            number(4)
        );
    }

    #[test]
    fn requests_notifications_and_junk_are_not_answers() {
        assert_eq!(
            seen(r#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{}}"#),
            None
        );
        assert_eq!(
            seen(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"id":1}}"#),
            None
        );
        assert_eq!(seen(r#"{"jsonrpc":"2.0","result":{}}"#), None);
        assert_eq!(seen(r#"[{"id":1,"result":{}}]"#), None);
        assert_eq!(seen("not json at all"), None);
        assert_eq!(seen(r#"{"id":{"a":1},"result":{}}"#), None);
        let long = format!(r#"{{"id":"{}","result":{{}}}}"#, "x".repeat(500));
        assert_eq!(seen(&long), None);
    }

    #[test]
    fn the_answer_is_known_before_its_end_when_the_id_comes_first() {
        let mut envelope = Envelope::default();
        envelope.feed(br#"{"jsonrpc":"2.0","id":5,"result":{"content":[{"text":"aaaa"#);
        assert_eq!(envelope.response_id(), Some(NumberOrString::Number(5)));
        envelope.reset();
        envelope.feed(br#"{"jsonrpc":"2.0","id":5,"method":"x","params":{"a":"aaaa"#);
        assert_eq!(envelope.response_id(), None);
    }
}
