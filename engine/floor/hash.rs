//! Hashing: SHA-256 as lowercase hex, of bytes or of a value's compact JSON. Fingerprints,
//! cache keys, definition hashes and file hashes are all made here, so they agree byte for byte.

use sha2::{Digest, Sha256};

/// SHA-256 of `bytes`, lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&sha256_digest(bytes))
}

/// [`sha256_hex`] as the digest's bytes.
pub(crate) fn sha256_digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// SHA-256 of a value's compact JSON (what `to_string` gives), hashed as it is written, through
/// a buffer: the serializer writes a token at a time, and a hasher update per token cost more
/// than the hashing (fingerprints were 43% of a dry-run's instructions).
pub(crate) fn sha256_json(value: &impl serde::Serialize) -> String {
    hex(&sha256_json_digest(value))
}

/// [`sha256_json`] as the digest's bytes.
pub(crate) fn sha256_json_digest(value: &impl serde::Serialize) -> [u8; 32] {
    let mut hasher = std::io::BufWriter::with_capacity(4096, Sha256::new());
    // Writing JSON into a hasher cannot fail.
    let _ = serde_json::to_writer(&mut hasher, value);
    hasher
        .into_inner()
        .map(|hasher| hasher.finalize().into())
        .unwrap_or_default()
}

/// How many bytes `value` takes as compact JSON, counted without keeping them.
pub(crate) fn json_size(value: &impl serde::Serialize) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len() as u64;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The bytes of a SHA-256 written as 64 lowercase hex digits (as the engine writes every
/// hash), else None. By hand, in one pass: the `hex` crate's decoder, a table lookup and a
/// check a digit, was 3% of a no-op's time, which reads three of these a stage.
pub(crate) fn digest_of_hex(text: &str) -> Option<[u8; 32]> {
    /// Each byte's value as a lowercase hex digit, or 0x10 for a byte that is not one.
    const DIGIT: [u8; 256] = {
        let mut table = [0x10u8; 256];
        let mut i = 0;
        while i < 10 {
            table[b'0' as usize + i] = i as u8;
            i += 1;
        }
        let mut i = 0;
        while i < 6 {
            table[b'a' as usize + i] = 10 + i as u8;
            i += 1;
        }
        table
    };
    let text: &[u8; 64] = text.as_bytes().try_into().ok()?;
    let mut digest = [0u8; 32];
    // No branch a digit: whether one was not a digit is looked at once, at the end.
    let mut bad = 0u8;
    for (byte, pair) in digest.iter_mut().zip(text.chunks_exact(2)) {
        let (high, low) = (DIGIT[usize::from(pair[0])], DIGIT[usize::from(pair[1])]);
        bad |= high | low;
        *byte = (high << 4) | (low & 0xf);
    }
    (bad & 0x10 == 0).then_some(digest)
}

/// A SHA-256 as a run's record keeps it: its 32 bytes, written and read as 64 lowercase hex
/// digits. A record holds four a stage (at 10,000 stages, 64-byte strings were 2.6 MB of a
/// no-op's heap). Any other text read from a record is kept as it is.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum Sha256Hex {
    Bytes([u8; 32]),
    Text(Box<str>),
}

impl Sha256Hex {
    /// The hash written as `text`: its bytes when it is 64 lowercase hex digits.
    pub(crate) fn new(text: &str) -> Self {
        digest_of_hex(text).map_or_else(|| Sha256Hex::Text(text.into()), Sha256Hex::Bytes)
    }

    /// The hash as text, written into `buffer` when it is held as bytes.
    pub(crate) fn as_str<'a>(&'a self, buffer: &'a mut [u8; 64]) -> &'a str {
        match self {
            Sha256Hex::Bytes(bytes) => {
                hex_digits(bytes, buffer);
                // Hex digits are UTF-8.
                std::str::from_utf8(buffer).unwrap_or_default()
            }
            Sha256Hex::Text(text) => text,
        }
    }

    /// The hash as a JSON string, appended to `out`: its digits straight, as they need no
    /// escaping (a record writes four a stage); text read as it was, escaped.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Sha256Hex::Bytes(bytes) => {
                let mut digits = [0u8; 64];
                hex_digits(bytes, &mut digits);
                out.push(b'"');
                out.extend_from_slice(&digits);
                out.push(b'"');
            }
            Sha256Hex::Text(text) => crate::floor::json::string(out, text),
        }
    }
}

/// The lowercase hex digits of a digest.
fn hex_digits(bytes: &[u8; 32], out: &mut [u8; 64]) {
    /// Each byte's two digits.
    const PAIRS: [[u8; 2]; 256] = {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut table = [[0u8; 2]; 256];
        let mut i = 0;
        while i < 256 {
            table[i] = [DIGITS[i >> 4], DIGITS[i & 0xf]];
            i += 1;
        }
        table
    };
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&PAIRS[usize::from(*byte)]);
    }
}

impl From<&str> for Sha256Hex {
    fn from(text: &str) -> Self {
        Sha256Hex::new(text)
    }
}

impl std::fmt::Display for Sha256Hex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str(&mut [0; 64]))
    }
}

impl std::fmt::Debug for Sha256Hex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str(&mut [0; 64]))
    }
}

impl PartialEq<str> for Sha256Hex {
    fn eq(&self, other: &str) -> bool {
        self.as_str(&mut [0; 64]) == other
    }
}

impl serde::Serialize for Sha256Hex {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str(&mut [0; 64]))
    }
}

impl<'de> serde::Deserialize<'de> for Sha256Hex {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Sha256Hex;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a SHA-256 as hex")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Sha256Hex, E> {
                Ok(Sha256Hex::new(text))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// Lowercase hex of a digest.
pub(crate) fn hex(digest: &[u8]) -> String {
    // Into a buffer rather than char by char: a run hashes every stage's fingerprint and
    // output, and formatting cost as much as the hashing.
    let mut out = vec![0u8; digest.len() * 2];
    // The buffer is exactly twice the input's length, which is all `encode_to_slice` needs.
    let _ = hex::encode_to_slice(digest, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hash held as bytes reads and writes as the hex it was made from; other text is kept
    /// as it is, so a record with any value reads back the same.
    #[test]
    fn a_hash_held_as_bytes_is_the_hex_it_was_read_from() {
        let hex = sha256_hex(b"x");
        let held = Sha256Hex::new(&hex);
        assert!(matches!(held, Sha256Hex::Bytes(_)));
        assert_eq!(held.to_string(), hex);
        assert_eq!(serde_json::to_string(&held).unwrap(), format!("\"{hex}\""));
        let read: Sha256Hex = serde_json::from_str(&format!("\"{hex}\"")).unwrap();
        assert_eq!(read, held);
        assert!(held == *hex.as_str());
        for value in [held.clone(), Sha256Hex::new("a \"quoted\" f00d\n")] {
            let mut written = Vec::new();
            value.write_json(&mut written);
            assert_eq!(written, serde_json::to_vec(&value.to_string()).unwrap());
        }
        for bad in ["g", "A", " ", "\u{e9}"] {
            let text = format!("{}{bad}", &hex[..63]);
            assert!(digest_of_hex(&text).is_none(), "{text}");
        }
        for text in ["f00d", "", &hex.to_uppercase(), &format!("{hex}0")] {
            let kept = Sha256Hex::new(text);
            assert!(matches!(kept, Sha256Hex::Text(_)), "{text}");
            assert_eq!(kept.to_string(), text);
            assert_eq!(
                serde_json::from_str::<Sha256Hex>(&serde_json::to_string(&kept).unwrap()).unwrap(),
                kept
            );
        }
    }
}
