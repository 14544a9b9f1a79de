//! Large values stored once per run: `artifacts/blobs.jsonl.gz`, content-addressed within the
//! run. A stage output of at least [`BLOB_MIN`] bytes of JSON is written to `outputs.jsonl`
//! packed: each of its parts (a string, an array, an object) whose JSON, its own large parts
//! packed first, is still at least [`BLOB_MIN`] bytes is replaced by `{"$blob": "<id>"}` (its
//! SHA-256, shortened),
//! and the part itself is written once to the blob file, whichever stage (or how many) holds
//! it. The same document read by one stage, parsed by the next and quoted by a third is then
//! kept once for all of them, compressed.
//!
//! The blob file is a series of gzip members, one per flush, each a few lines
//! `{"id": ..., "value": ...}`; it is flushed before the `outputs.jsonl` lines that refer
//! to it, so a reader never meets a reference whose blob was not written. A torn last member
//! (a kill during a flush) loses only the blobs no line refers to yet. An object of the output
//! whose only key is `$blob` or `$lit` is itself written as `{"$lit": ...}`, so that no value
//! reads back as something else.
//!
//! Past the run's budget ([`BlobStore::with_budget`]), a new blob is not stored: its place holds
//! `{"$cut": {"id": ..., "size": ...}}`, the stage is named in the record's `cut`, and a
//! reader sees that stage without a recorded output (a resume runs it again).

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The blob file, below `artifacts/`.
pub(crate) const BLOBS: &str = "blobs.jsonl.gz";

/// A part of an output whose JSON is at least this long is stored once as a blob.
pub(crate) const BLOB_MIN: u64 = 256;

/// A blob is named by this many hex digits of its SHA-256 (80 bits): unique within a run by a
/// wide margin, and a quarter of the bytes of a whole hash, which would otherwise be the
/// largest part of what a packed output and the compressed blobs hold.
const ID_DIGITS: usize = 20;

const REF: &str = "$blob";
const LITERAL: &str = "$lit";
const CUT: &str = "$cut";

/// The blobs of a run being written: those stored so far, and those not yet flushed.
#[derive(Debug)]
pub(crate) struct BlobStore {
    path: PathBuf,
    stored: HashSet<String>,
    pending: Vec<u8>,
    /// The JSON bytes stored so far (before compression), against the budget.
    bytes: u64,
    budget: Option<u64>,
    /// Whether a value was cut since [`BlobStore::take_cut`] last asked.
    cut: bool,
}

impl BlobStore {
    /// The store of the run whose artifacts are in `artifacts`.
    pub(crate) fn new(artifacts: &Path) -> BlobStore {
        BlobStore {
            path: artifacts.join(BLOBS),
            stored: HashSet::new(),
            pending: Vec::new(),
            bytes: 0,
            budget: None,
            cut: false,
        }
    }

    /// Store at most `bytes` bytes of JSON in blobs; a value past them is cut.
    pub(crate) fn with_budget(mut self, bytes: Option<u64>) -> BlobStore {
        self.budget = bytes;
        self
    }

    /// Whether the value packed since the last call lost a part to the budget.
    pub(crate) fn take_cut(&mut self) -> bool {
        std::mem::take(&mut self.cut)
    }

    /// `value` with its large parts replaced by references to blobs (see the module's docs);
    /// `None` when it is too small to hold any.
    pub(crate) fn pack(&mut self, value: &Value) -> std::io::Result<Option<Value>> {
        if crate::floor::hash::json_size(value) < BLOB_MIN {
            return Ok(None);
        }
        self.pack_part(value).map(Some)
    }

    fn pack_part(&mut self, value: &Value) -> std::io::Result<Value> {
        let packed = match value {
            Value::String(text) if (text.len() as u64) < BLOB_MIN => return Ok(value.clone()),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|item| self.pack_part(item))
                    .collect::<std::io::Result<_>>()?,
            ),
            Value::Object(map) => {
                let mut packed = Map::with_capacity(map.len());
                for (key, item) in map {
                    packed.insert(key.clone(), self.pack_part(item)?);
                }
                if map.len() == 1 && [REF, LITERAL, CUT].iter().any(|key| map.contains_key(*key)) {
                    single(LITERAL, Value::Object(packed))
                } else {
                    Value::Object(packed)
                }
            }
            other => other.clone(),
        };
        if crate::floor::hash::json_size(&packed) < BLOB_MIN {
            return Ok(packed);
        }
        let json = serde_json::to_vec(&packed).map_err(std::io::Error::other)?;
        let json = crate::floor::secrets::redact_bytes(&json);
        let mut id = crate::floor::hash::sha256_hex(&json);
        id.truncate(ID_DIGITS);
        if !self.stored.contains(&id) {
            let size = json.len() as u64;
            if self.budget.is_some_and(|budget| self.bytes + size > budget) {
                self.cut = true;
                return Ok(single(CUT, serde_json::json!({ "id": id, "size": size })));
            }
            self.bytes += size;
            self.pending.extend_from_slice(b"{\"id\":\"");
            self.pending.extend_from_slice(id.as_bytes());
            self.pending.extend_from_slice(b"\",\"value\":");
            self.pending.extend_from_slice(&json);
            self.pending.extend_from_slice(b"}\n");
            self.stored.insert(id.clone());
        }
        Ok(single(REF, Value::String(id)))
    }

    /// Compress the blobs stored since the last flush, as one gzip member at the end of the
    /// file.
    pub(crate) fn flush(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        let mut gzip = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        gzip.write_all(&self.pending)?;
        gzip.finish()?;
        self.pending.clear();
        Ok(())
    }
}

fn single(key: &str, value: Value) -> Value {
    let mut map = Map::with_capacity(1);
    map.insert(key.to_string(), value);
    Value::Object(map)
}

/// The blobs of a recorded run, read whole.
#[derive(Debug, Default)]
pub(crate) struct Blobs {
    by_id: HashMap<String, Value>,
}

#[derive(serde::Deserialize)]
struct BlobLine {
    id: String,
    value: Value,
}

impl Blobs {
    /// The blobs in `artifacts/` (none when the run has no blob file); a torn end is skipped.
    pub(crate) fn read(artifacts: &Path) -> Blobs {
        let mut by_id = HashMap::new();
        if let Ok(file) = File::open(artifacts.join(BLOBS)) {
            let lines = BufReader::new(flate2::read::MultiGzDecoder::new(BufReader::new(file)));
            for line in lines.lines().map_while(Result::ok) {
                if let Ok(blob) = serde_json::from_str::<BlobLine>(&line) {
                    by_id.insert(blob.id, blob.value);
                }
            }
        }
        Blobs { by_id }
    }

    /// `packed` with its references replaced by their blobs; `None` when one is missing or was
    /// cut.
    pub(crate) fn unpack(&self, packed: &Value) -> Option<Value> {
        Some(match packed {
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|item| self.unpack(item))
                    .collect::<Option<_>>()?,
            ),
            Value::Object(map) if map.len() == 1 => match map.iter().next() {
                Some((key, Value::String(id))) if key == REF => self.unpack(self.by_id.get(id)?)?,
                Some((key, Value::Object(inner))) if key == LITERAL => {
                    Value::Object(self.unpack_fields(inner)?)
                }
                Some((key, _)) if key == CUT => return None,
                _ => Value::Object(self.unpack_fields(map)?),
            },
            Value::Object(map) => Value::Object(self.unpack_fields(map)?),
            other => other.clone(),
        })
    }

    fn unpack_fields(&self, map: &Map<String, Value>) -> Option<Map<String, Value>> {
        map.iter()
            .map(|(key, value)| Some((key.clone(), self.unpack(value)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_repeated_part_is_stored_once_and_every_value_reads_back_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = BlobStore::new(dir.path());
        let doc = "a line of a document that several stages hold\n".repeat(20);
        let first = json!([doc, {"body": doc, "n": 1}]);
        // Objects that look like references are kept as they are.
        let second = json!({"docs": [{"text": doc}], "$blob": "not a reference",
                            "odd": {"$blob": "x"}, "odder": {"$lit": doc}});
        let small = json!({"n": 1});
        assert_eq!(store.pack(&small).unwrap(), None);
        let packed = [
            store.pack(&first).unwrap().unwrap(),
            store.pack(&second).unwrap().unwrap(),
        ];
        store.flush().unwrap();
        let size = std::fs::metadata(dir.path().join(BLOBS)).unwrap().len();
        assert!(
            size < doc.len() as u64 / 2,
            "{size} bytes for a document of {}",
            doc.len()
        );
        for part in &packed {
            assert!(
                crate::floor::hash::json_size(part) < 200,
                "{part}: the document stayed in the line"
            );
        }
        let blobs = Blobs::read(dir.path());
        assert_eq!(blobs.unpack(&packed[0]), Some(first));
        assert_eq!(blobs.unpack(&packed[1]), Some(second));
        // The document once, and the two values that hold it.
        let lines = std::io::read_to_string(flate2::read::MultiGzDecoder::new(
            File::open(dir.path().join(BLOBS)).unwrap(),
        ))
        .unwrap();
        assert_eq!(lines.matches("a line of a document").count(), 20);
    }

    #[test]
    fn past_the_budget_a_part_is_cut_and_reads_as_missing() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = BlobStore::new(dir.path()).with_budget(Some(1000));
        let one = json!("x".repeat(600));
        let two = json!("y".repeat(600));
        let packed_one = store.pack(&one).unwrap().unwrap();
        assert!(!store.take_cut());
        // Stored already: the same value again costs nothing.
        assert_eq!(store.pack(&one).unwrap().unwrap(), packed_one);
        assert!(!store.take_cut());
        let packed_two = store.pack(&two).unwrap().unwrap();
        assert!(store.take_cut());
        assert_eq!(packed_two["$cut"]["size"], 602);
        store.flush().unwrap();
        let blobs = Blobs::read(dir.path());
        assert_eq!(blobs.unpack(&packed_one), Some(one));
        assert_eq!(blobs.unpack(&packed_two), None);
        // A reference to a blob that is not there (a torn file) reads as missing too.
        assert_eq!(blobs.unpack(&json!({"$blob": "0".repeat(20)})), None);
    }
}
