//! The checked shape of a catalog (its header and keys, and which keys play which role) and the
//! value of one key of an entry, a text or a list.

use std::collections::HashSet;

use super::with::{KeySpec, MergeArgs, Role};
use crate::builtins::BuiltinError;

/// The checked shape of a catalog: its header and keys, and which keys play which role.
#[derive(Debug)]
pub(super) struct Format {
    pub(super) header: String,
    pub(super) keys: Vec<KeySpec>,
    pub(super) relation: Option<usize>,
    pub(super) alias: Option<usize>,
    pub(super) source: Option<usize>,
}

impl Format {
    pub(super) fn new(args: &MergeArgs) -> Result<Format, BuiltinError> {
        let header = args.header.trim();
        if header.is_empty() || header.contains('\n') {
            return Err(BuiltinError::new(
                "catalog header must be one non-empty line",
            ));
        }
        if args.keys.is_empty() {
            return Err(BuiltinError::new("catalog keys must not be empty"));
        }
        let mut fields = HashSet::new();
        let mut labels = HashSet::new();
        for key in &args.keys {
            if key.field.is_empty() || key.field == "area" || key.field == "concept" {
                return Err(BuiltinError::new(format!(
                    "catalog key field `{}` is empty or reserved (area, concept)",
                    key.field
                )));
            }
            let label_ok = !key.label.trim().is_empty()
                && key.label.trim() == key.label
                && !key.label.contains(['*', ':', '\n']);
            if !label_ok {
                return Err(BuiltinError::new(format!(
                    "catalog key label `{}` must be non-empty, trimmed, without `*`, `:` or newlines",
                    key.label
                )));
            }
            if !fields.insert(key.field.as_str()) {
                return Err(BuiltinError::new(format!(
                    "duplicate catalog key field `{}`",
                    key.field
                )));
            }
            if !labels.insert(key.label.to_lowercase()) {
                return Err(BuiltinError::new(format!(
                    "duplicate catalog key label `{}`",
                    key.label
                )));
            }
        }
        if args.keys[0].list {
            return Err(BuiltinError::new(format!(
                "the first catalog key `{}` carries the entry's markers and must not be a list",
                args.keys[0].field
            )));
        }
        let role = |name: &str,
                    role: &Role,
                    usual: &str,
                    list: bool|
         -> Result<Option<usize>, BuiltinError> {
            let Some(field) = role.field(usual, &args.keys) else {
                return Ok(None);
            };
            match args.keys.iter().position(|key| key.field == field) {
                Some(index) if args.keys[index].list == list => Ok(Some(index)),
                Some(_) => Err(BuiltinError::new(format!(
                    "{name} `{field}` must name a key with list = {list}"
                ))),
                None => Err(BuiltinError::new(format!(
                    "{name} `{field}` names no catalog key"
                ))),
            }
        };
        Ok(Format {
            header: header.to_owned(),
            keys: args.keys.clone(),
            relation: role("relation_field", &args.relation_field, "relations", true)?,
            alias: role("alias_field", &args.alias_field, "aliases", true)?,
            source: role("source_field", &args.source_field, "source", false)?,
        })
    }

    pub(super) fn key_by_label(&self, label: &str) -> Option<usize> {
        self.keys
            .iter()
            .position(|key| same_name(&key.label, label))
    }
}

/// One key's value in an entry.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Field {
    Text(String),
    List(Vec<String>),
}

impl Field {
    pub(super) fn empty(list: bool) -> Field {
        if list {
            Field::List(Vec::new())
        } else {
            Field::Text(String::new())
        }
    }

    pub(super) fn parse(text: &str, list: bool) -> Field {
        if list {
            Field::List(parse_list(text))
        } else {
            Field::Text(text.trim().to_owned())
        }
    }

    pub(super) fn render(&self) -> String {
        match self {
            Field::Text(text) => text.clone(),
            Field::List(items) if items.is_empty() => "none".to_owned(),
            Field::List(items) => items.join(", "),
        }
    }

    pub(super) fn items(&self) -> &[String] {
        match self {
            Field::List(items) => items,
            Field::Text(_) => &[],
        }
    }
}

/// A comma-separated list: items trimmed, empty ones and case-insensitive repeats dropped, a lone
/// "none" meaning no item.
pub(super) fn parse_list(text: &str) -> Vec<String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("none") {
        return Vec::new();
    }
    let mut items: Vec<String> = Vec::new();
    for item in text
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
    {
        if !contains_ci(&items, item) {
            items.push(item.to_owned());
        }
    }
    items
}

pub(super) fn contains_ci(items: &[String], item: &str) -> bool {
    items.iter().any(|existing| same_name(existing, item))
}

pub(super) fn same_name(a: &str, b: &str) -> bool {
    a.to_lowercase() == b.to_lowercase()
}
