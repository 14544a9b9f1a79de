//! Compact JSON written by hand, for the documents a run makes once a stage: the fingerprint's
//! document and the rendered action it hashes, and the stage's two events.
//!
//! serde_json looks at every byte of every string one at a time for what must be escaped; in a
//! dry-run of 10,000 stages that loop was a seventh of all the CPU, and the strings of these
//! documents (ids, hex digests, timestamps, argv words) almost never hold anything to escape.
//! Here a string is checked 32 bytes at a time and copied whole when nothing in it needs an
//! escape; one that does goes through serde_json. What is written is byte for byte what
//! serde_json writes for the same document (the tests compare them): fingerprints are hashes of
//! these bytes.

use serde::Serialize;

/// Whether JSON must escape a byte of `bytes`: a control character, `"` or `\`. Bytes above
/// ASCII are written as they are, as serde_json does.
// Bitwise, not lazy: a branch a byte is what keeps the loop off vector instructions.
#[allow(clippy::needless_bitwise_bool)]
fn needs_escape(bytes: &[u8]) -> bool {
    let special = |b: u8| (b < 0x20) | (b == b'"') | (b == b'\\');
    // No early exit inside a chunk, so the compiler checks it with vector instructions; most
    // strings a record holds are short (ids, statuses, times), so the tail is taken 8 bytes at
    // a time too before the last few one by one.
    let in_chunks = |bytes: &[u8], size: usize| {
        let mut chunks = bytes.chunks_exact(size);
        let found = chunks
            .by_ref()
            .any(|chunk| chunk.iter().fold(false, |found, &b| found | special(b)));
        (found, chunks.remainder().len())
    };
    let (found, rest) = in_chunks(bytes, 16);
    if found {
        return true;
    }
    let tail = &bytes[bytes.len() - rest..];
    let (found, rest) = in_chunks(tail, 8);
    found || tail[tail.len() - rest..].iter().any(|&b| special(b))
}

/// `value` as a JSON string.
pub(crate) fn string(out: &mut Vec<u8>, value: &str) {
    if needs_escape(value.as_bytes()) {
        // Writing into a vector cannot fail.
        let _ = serde_json::to_writer(&mut *out, value);
        return;
    }
    out.reserve(value.len() + 2);
    out.push(b'"');
    out.extend_from_slice(value.as_bytes());
    out.push(b'"');
}

/// `value` as a JSON string, or `null`.
pub(crate) fn opt_string(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => string(out, value),
        None => out.extend_from_slice(b"null"),
    }
}

/// Anything else, as serde_json writes it. It fails where serde_json does (a map whose keys
/// are not strings, a path that is not UTF-8), having written what serde_json had by then.
pub(crate) fn serde(out: &mut Vec<u8>, value: &impl Serialize) -> Result<(), ()> {
    serde_json::to_writer(&mut *out, value).map_err(drop)
}

/// An array of strings.
pub(crate) fn strings<'a>(out: &mut Vec<u8>, values: impl IntoIterator<Item = &'a str>) {
    out.push(b'[');
    for (i, value) in values.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, value);
    }
    out.push(b']');
}

/// A long document (a record or a plan of thousands of stages) goes to its file through a
/// buffer of about this many bytes.
pub(crate) const CHUNK: usize = 64 * 1024;

/// What a document's writer calls between its pieces (see [`write_document`]).
pub(crate) type Drain<'a> = dyn FnMut(&mut Vec<u8>) -> std::io::Result<()> + 'a;

/// Write a long document into `out`: `write` puts it into the buffer it is given, calling
/// `drain` between pieces (a stage each), which hands the buffer to `out` whenever it holds a
/// [`CHUNK`]. With a secret registered (see [`crate::floor::secrets`]) the document is made
/// whole, then redacted, since a secret may straddle any two pieces.
pub(crate) fn write_document(
    out: &mut dyn std::io::Write,
    write: impl FnOnce(&mut Vec<u8>, &mut Drain<'_>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    if crate::floor::secrets::active() {
        let mut text = Vec::new();
        write(&mut text, &mut |_| Ok(()))?;
        return out.write_all(&crate::floor::secrets::redact_bytes(&text));
    }
    streamed(out, write)
}

/// [`write_document`] without redaction.
fn streamed(
    out: &mut dyn std::io::Write,
    write: impl FnOnce(&mut Vec<u8>, &mut Drain<'_>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut buffer = Vec::with_capacity(CHUNK + 4096);
    write(&mut buffer, &mut |buffer: &mut Vec<u8>| {
        if buffer.len() >= CHUNK {
            out.write_all(buffer)?;
            buffer.clear();
        }
        Ok(())
    })?;
    out.write_all(&buffer)
}

/// A JSON object being written: its members in the order they are given.
pub(crate) struct Object<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Object<'a> {
    pub(crate) fn new(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Object { out, first: true }
    }

    /// Start a member: what follows in the returned buffer is its value. Keys are the format's
    /// own names, which need no escaping: a record of 10,000 stages writes 80,000 of them, and
    /// checking each for characters to escape was a tenth of the time it took.
    pub(crate) fn key(&mut self, key: &'static str) -> &mut Vec<u8> {
        debug_assert!(!needs_escape(key.as_bytes()), "{key}");
        self.out.reserve(key.len() + 4);
        self.next_member();
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }

    /// The comma before every member but the first.
    fn next_member(&mut self) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
    }

    /// Start a member whose key is data (a stage's id), escaped as JSON needs.
    pub(crate) fn key_of(&mut self, key: &str) -> &mut Vec<u8> {
        self.next_member();
        string(self.out, key);
        self.out.push(b':');
        self.out
    }

    pub(crate) fn string(&mut self, key: &'static str, value: &str) {
        string(self.key(key), value);
    }

    pub(crate) fn opt_string(&mut self, key: &'static str, value: Option<&str>) {
        opt_string(self.key(key), value);
    }

    pub(crate) fn u64(&mut self, key: &'static str, value: u64) {
        let mut digits = itoa::Buffer::new();
        self.key(key)
            .extend_from_slice(digits.format(value).as_bytes());
    }

    pub(crate) fn bool(&mut self, key: &'static str, value: bool) {
        let value: &[u8] = if value { b"true" } else { b"false" };
        self.key(key).extend_from_slice(value);
    }

    /// The buffer, to go on with the value of the member being written.
    pub(crate) fn raw(&mut self) -> &mut Vec<u8> {
        self.out
    }

    pub(crate) fn end(self) {
        self.out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long document is handed over a chunk at a time, whole.
    #[test]
    fn a_long_document_is_written_a_chunk_at_a_time() {
        struct Writes(Vec<u8>, Vec<usize>);
        impl std::io::Write for Writes {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.extend_from_slice(bytes);
                self.1.push(bytes.len());
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut writes = Writes(Vec::new(), Vec::new());
        // Streamed as it is when no secret is registered (other tests register some).
        streamed(&mut writes, |buffer, drain| {
            strings(buffer, std::iter::repeat_n("piece", 1));
            for _ in 0..40_000 {
                buffer.extend_from_slice(b",\"0123456789\"");
                drain(buffer)?;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(writes.0.len(), 9 + 40_000 * 13);
        assert!(writes.1.len() > 4, "{:?}", writes.1);
        assert!(writes.1.iter().all(|&n| n < CHUNK + 4096), "{:?}", writes.1);
    }

    /// Strings of every length around the chunk's, with each kind of byte to escape at each
    /// place, beside non-ASCII text: written as serde_json writes them.
    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        let mut cases: Vec<String> = vec![
            String::new(),
            "plain".into(),
            "héllo wörld ✓ 日本".into(),
            "\u{7f} delete is not escaped".into(),
            "tab\tnew\nline\r\u{8}\u{c}".into(),
        ];
        // Every place in strings that fill 16- and 8-byte chunks and leave tails of each length.
        for len in (1..=40).chain([63, 64, 65, 100]) {
            for special in ['"', '\\', '\n', '\u{1}', '\u{1f}', 'é'] {
                for at in 0..len {
                    let mut s: Vec<char> = std::iter::repeat_n('a', len).collect();
                    s[at] = special;
                    cases.push(s.into_iter().collect());
                }
            }
        }
        for case in &cases {
            let mut out = Vec::new();
            string(&mut out, case);
            assert_eq!(out, serde_json::to_vec(case).unwrap(), "{case:?}");
        }
        let mut out = Vec::new();
        strings(&mut out, cases.iter().map(String::as_str));
        assert_eq!(out, serde_json::to_vec(&cases).unwrap());
    }

    #[test]
    fn objects_are_written_as_serde_json_writes_them() {
        let mut out = Vec::new();
        let mut object = Object::new(&mut out);
        string(object.key_of("a\"b"), "x");
        object.opt_string("none", None);
        object.opt_string("some", Some("y\n"));
        object.u64("n", u64::MAX);
        {
            let mut inner = Object::new(object.key("inner"));
            inner.u64("zero", 0);
            inner.end();
        }
        serde(object.key("list"), &[1.5, -2.0]).unwrap();
        object.end();
        let expected = serde_json::json!({
            "a\"b": "x", "none": null, "some": "y\n", "n": u64::MAX,
            "inner": { "zero": 0 }, "list": [1.5, -2.0],
        });
        assert_eq!(out, serde_json::to_vec(&expected).unwrap());
    }
}
