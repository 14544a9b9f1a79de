//! The `with` arguments of `catalog.merge`: the catalog's text, the entries to merge, and the
//! format (header, keys and the role each key plays).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::builtins::BuiltinError;

/// The catalog as it is, the entries to merge into it, and its format.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct MergeArgs {
    /// The catalog file's current text; null or absent when the file does not exist yet. Parsed
    /// leniently: hand edits survive.
    pub(super) current: Option<String>,
    /// Entries to merge, usually a model's answer. Matched to existing entries by concept name,
    /// case-insensitively: in the same area first, then in any area. An entry without an area only
    /// updates an existing concept.
    pub(super) entries: Vec<RawEntry>,
    /// The line the file always starts with (one line).
    #[schemars(length(min = 1))]
    pub(super) header: String,
    /// The bullets of every entry, in order. The first one (not a list) carries the entry's TODO
    /// markers and is checked for contradictions.
    #[schemars(length(min = 1))]
    pub(super) keys: Vec<KeySpec>,
    /// The list key whose items must each name a concept of the file. Absent: `relations` when a
    /// key has that field; null: none.
    #[serde(default)]
    #[schemars(extend("default" = "relations"))]
    pub(super) relation_field: Role,
    /// The list key holding other names of a concept; a new relation naming an alias is rewritten
    /// to the concept. Absent: `aliases` when a key has that field; null: none.
    #[serde(default)]
    #[schemars(extend("default" = "aliases"))]
    pub(super) alias_field: Role,
    /// The text key citing where an entry comes from: the newer one is kept, and its YYYY-MM-DD
    /// date orders pruning ("inferred" or no date: oldest). Absent: `source` when a key has that
    /// field; null: none.
    #[serde(default)]
    #[schemars(extend("default" = "source"))]
    pub(super) source_field: Role,
    /// The noun the summary starts with ("Catalog updated: ...").
    #[serde(default = "default_label")]
    #[schemars(length(min = 1))]
    pub(super) label: String,
    /// Line budget of the rendered file; the oldest unreferenced, unflagged entries are pruned
    /// until it fits.
    #[serde(default = "default_max_lines")]
    #[schemars(range(min = 1))]
    pub(super) max_lines: usize,
    /// Byte budget of the rendered file, pruned like max_lines.
    #[serde(default = "default_max_bytes")]
    #[schemars(range(min = 1))]
    pub(super) max_bytes: usize,
}

/// One bullet: `- **<label>**: <value>`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct KeySpec {
    /// The property name in `entries` (not `area` or `concept`).
    #[schemars(length(min = 1))]
    pub(super) field: String,
    /// The bold label in the file.
    #[schemars(length(min = 1))]
    pub(super) label: String,
    /// A comma-separated list ("none" when empty), merged by union; otherwise one line of text.
    #[serde(default)]
    pub(super) list: bool,
}

/// One entry to merge, as given: read leniently by [`candidate`], which warns of what it skips.
/// Its schema names `area` and `concept` and types the key fields, whose names the keys choose;
/// a struct could not say that, so the schema is written out here.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub(super) struct RawEntry(pub(super) Map<String, Value>);

impl JsonSchema for RawEntry {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RawEntry".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "One concept: its area, its name, and one property per key field (for the default keys: definition, aliases, relations, source).",
            "required": ["concept"],
            "properties": {
                "area": { "type": "string", "description": "The area (## section) a new concept goes to; ignored when the concept already exists." },
                "concept": { "type": "string", "minLength": 1, "description": "The concept name (### heading)." }
            },
            "additionalProperties": {
                "type": ["string", "number", "boolean", "null", "array"],
                "description": "A key's value: text, or for list keys a list of strings or a comma-separated string."
            }
        })
    }
}

/// A role field as written: absent, the usual field when a key has it (so custom keys need not
/// switch off roles they lack); null, no field plays the role; else the field named.
#[derive(Debug, Clone, Default)]
pub(super) enum Role {
    #[default]
    Usual,
    Off,
    Field(String),
}

impl Role {
    /// The field playing the role, `usual` standing for itself when a key has that field.
    pub(super) fn field(&self, usual: &str, keys: &[KeySpec]) -> Option<String> {
        match self {
            Role::Usual => keys
                .iter()
                .any(|key| key.field == usual)
                .then(|| usual.to_owned()),
            Role::Off => None,
            Role::Field(field) => Some(field.clone()),
        }
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match Option::<String>::deserialize(deserializer)? {
            Some(field) => Role::Field(field),
            None => Role::Off,
        })
    }
}

impl JsonSchema for Role {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Role".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        Option::<String>::json_schema(generator)
    }
}

pub(super) fn parse_args(with: &Value) -> Result<MergeArgs, BuiltinError> {
    serde_json::from_value(with.clone())
        .map_err(|err| BuiltinError::new(format!("invalid catalog.merge arguments: {err}")))
}

fn default_label() -> String {
    "Catalog".to_owned()
}

fn default_max_lines() -> usize {
    300
}

fn default_max_bytes() -> usize {
    12288
}
