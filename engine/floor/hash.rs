//! Hashing: SHA-256 as lowercase hex, of bytes or of a value's compact JSON. Fingerprints,
//! cache keys, definition hashes and file hashes are all made here, so they agree byte for byte.

use sha2::{Digest, Sha256};

/// SHA-256 of `bytes`, lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
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

/// Lowercase hex of a digest.
pub(crate) fn hex(digest: &[u8]) -> String {
    // Into a buffer rather than char by char: a run hashes every stage's fingerprint and
    // output, and formatting cost as much as the hashing.
    let mut out = vec![0u8; digest.len() * 2];
    // The buffer is exactly twice the input's length, which is all `encode_to_slice` needs.
    let _ = hex::encode_to_slice(digest, &mut out);
    String::from_utf8(out).unwrap_or_default()
}
