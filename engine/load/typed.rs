//! A parsed TOML table read straight as a typed value, as if through the JSON document load
//! makes of it.
//!
//! `check` and a dry-run read a workflow file once, in a folder that keeps no parsed
//! documents. Building the JSON document only to read the typed workflow out of it was a fifth
//! of `check` on 10,000 stages, and several megabytes. [`read`] gives the same typed value
//! straight from the parser's table: every TOML value is handed to serde exactly as the
//! document's JSON value would be (integers by sign, datetimes as strings, a number JSON
//! cannot hold as null). Anything it cannot read is left to the document path, which reads it
//! or says precisely what is wrong.

use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};
use toml::de::{DeTable, DeValue};

use crate::diag::SourceFile;

/// The typed reading of `source`, or `None` when it does not parse or does not read as a `T`
/// (the caller then goes the document way, which explains why).
pub(crate) fn read<T: DeserializeOwned>(source: &SourceFile) -> Option<T> {
    read_str(&source.text)
}

/// [`read`] of a text.
pub(crate) fn read_str<T: DeserializeOwned>(text: &str) -> Option<T> {
    let (table, errors) = DeTable::parse_recoverable(text);
    if !errors.is_empty() {
        return None;
    }
    T::deserialize(Table(table.get_ref())).ok()
}

/// Why a value did not read; the document path says it better, so the text is not shown.
#[derive(Debug)]
struct Unreadable;

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("does not read as the typed workflow")
    }
}

impl std::error::Error for Unreadable {}

impl de::Error for Unreadable {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        Unreadable
    }
}

/// An integer as the document holds it: `None` (null) past what an `i64` holds.
pub(crate) fn integer(value: &toml::de::DeInteger) -> Option<i64> {
    let text = value.as_str().replace('_', "");
    match value.radix() {
        10 => text.parse::<i64>().ok(),
        radix => i64::from_str_radix(&text[2..], radix).ok(),
    }
}

/// A float as the document holds it: `None` (null) for what JSON cannot hold (nan, inf).
pub(crate) fn float(value: &toml::de::DeFloat) -> Option<f64> {
    value
        .as_str()
        .replace('_', "")
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
}

struct Table<'a, 'de>(&'a DeTable<'de>);

struct Item<'a, 'de>(&'a DeValue<'de>);

impl Item<'_, '_> {
    /// Whether the document would hold null here.
    fn is_null(&self) -> bool {
        match self.0 {
            DeValue::Integer(i) => integer(i).is_none(),
            DeValue::Float(f) => float(f).is_none(),
            _ => false,
        }
    }
}

impl<'de> de::Deserializer<'de> for Table<'_, '_> {
    type Error = Unreadable;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Unreadable> {
        visitor.visit_map(Entries {
            entries: self.0.iter(),
            value: None,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

impl<'de> de::Deserializer<'de> for Item<'_, '_> {
    type Error = Unreadable;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Unreadable> {
        match self.0 {
            DeValue::String(text) => visitor.visit_str(text),
            // A JSON number that is not negative is read as unsigned, as serde_json hands it.
            DeValue::Integer(i) => match integer(i) {
                Some(n) => match u64::try_from(n) {
                    Ok(n) => visitor.visit_u64(n),
                    Err(_) => visitor.visit_i64(n),
                },
                None => visitor.visit_unit(),
            },
            DeValue::Float(f) => match float(f) {
                Some(f) => visitor.visit_f64(f),
                None => visitor.visit_unit(),
            },
            DeValue::Boolean(b) => visitor.visit_bool(*b),
            DeValue::Datetime(d) => visitor.visit_string(d.to_string()),
            DeValue::Array(items) => visitor.visit_seq(Items(items.iter())),
            DeValue::Table(table) => Table(table).deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Unreadable> {
        if self.is_null() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Unreadable> {
        visitor.visit_newtype_struct(self)
    }

    /// A string names a unit variant; a table of one key, a variant and its content.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Unreadable> {
        match self.0 {
            DeValue::String(text) => {
                visitor.visit_enum(IntoDeserializer::<Unreadable>::into_deserializer(&**text))
            }
            DeValue::Table(table) if table.len() == 1 => {
                let (key, value) = table.iter().next().ok_or(Unreadable)?;
                visitor.visit_enum(Variant {
                    name: key.get_ref(),
                    content: Item(value.get_ref()),
                })
            }
            _ => Err(Unreadable),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Unreadable> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

struct Items<'a, 'de>(std::slice::Iter<'a, toml::Spanned<DeValue<'de>>>);

impl<'de> de::SeqAccess<'de> for Items<'_, '_> {
    type Error = Unreadable;

    fn next_element_seed<S: de::DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Unreadable> {
        self.0
            .next()
            .map(|item| seed.deserialize(Item(item.get_ref())))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Entries<'a, 'de, I> {
    entries: I,
    value: Option<&'a DeValue<'de>>,
}

impl<'a, 'de, 'x, I> de::MapAccess<'x> for Entries<'a, 'de, I>
where
    'de: 'a,
    I: Iterator<
        Item = (
            &'a toml::Spanned<std::borrow::Cow<'de, str>>,
            &'a toml::Spanned<DeValue<'de>>,
        ),
    >,
{
    type Error = Unreadable;

    fn next_key_seed<S: de::DeserializeSeed<'x>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Unreadable> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(value.get_ref());
        let key: &str = key.get_ref();
        seed.deserialize(IntoDeserializer::<Unreadable>::into_deserializer(key))
            .map(Some)
    }

    fn next_value_seed<S: de::DeserializeSeed<'x>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, Unreadable> {
        seed.deserialize(Item(self.value.take().ok_or(Unreadable)?))
    }
}

/// A variant written as a table of one key.
struct Variant<'a, 'de> {
    name: &'a str,
    content: Item<'a, 'de>,
}

impl<'de, 'a, 'v> de::EnumAccess<'de> for Variant<'a, 'v> {
    type Error = Unreadable;
    type Variant = Item<'a, 'v>;

    fn variant_seed<S: de::DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Item<'a, 'v>), Unreadable> {
        let name =
            seed.deserialize(IntoDeserializer::<Unreadable>::into_deserializer(self.name))?;
        Ok((name, self.content))
    }
}

impl<'de> de::VariantAccess<'de> for Item<'_, '_> {
    type Error = Unreadable;

    fn unit_variant(self) -> Result<(), Unreadable> {
        Err(Unreadable)
    }

    fn newtype_variant_seed<S: de::DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<S::Value, Unreadable> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Unreadable> {
        de::Deserializer::deserialize_seq(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Unreadable> {
        de::Deserializer::deserialize_map(self, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::WorkflowFile;

    /// The typed reading straight from the table equals the reading of the JSON document.
    fn same_as_the_document(text: &str) {
        let source = SourceFile::new("w.toml", text);
        let (doc, _) = super::super::parse_document(&source, 0, false).expect("parses");
        let through_document: WorkflowFile = serde_json::from_value(doc).expect("reads");
        let straight: WorkflowFile = read(&source).expect("reads straight");
        assert_eq!(
            serde_json::to_value(&straight).unwrap(),
            serde_json::to_value(&through_document).unwrap(),
            "{text}"
        );
    }

    #[test]
    fn a_workflow_reads_the_same_straight_as_through_its_document() {
        same_as_the_document(
            r#"
[workflow]
description = "every kind of value"
writes = ["out/"]

[inputs.n]
type = "integer"
default = 0x1F

[inputs.when]
type = "string"
default = 1979-05-27T07:32:00Z

[stages.a]
shell = "echo {{ inputs.n }}"
timeout = "1.5s"
on_error = "continue"
cache = { ttl = "1h" }
env = { A = "1" }

[stages.b]
uses = "json.parse"
with = { text = "{}", big = 9_223_372_036_854_775_807, over = 9223372036854775808, neg = -3, f = 2.5, inf = inf, list = [1, "x", true, { k = 1979-05-27 }] }
after = ["a"]
dry_run_output = { ok = true }

[stages.c]
prompt = "p.md"
system = { inline = "be brief" }
model = "haiku"
temperature = 0
max_tokens = 100
output = { schema = "s.json" }

[outputs]
x = "{{ stages.a.output }}"
"#,
        );
    }

    /// Over every workflow the project ships or tests: what the document reads, the table
    /// reads the same; what the document refuses, the table refuses too.
    #[test]
    fn every_workflow_of_the_project_reads_as_its_document_does() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut read_both = 0;
        for folder in [
            "workflows",
            "tests/fixtures/check/workflows",
            "tests/fixtures/run/workflows",
        ] {
            for entry in std::fs::read_dir(root.join(folder)).unwrap().flatten() {
                let path = entry.path();
                if path.extension().is_none_or(|e| e != "toml") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let source = SourceFile::new("w.toml", text.as_str());
                let through_document = super::super::parse_document(&source, 0, false)
                    .ok()
                    .and_then(|(doc, _)| serde_json::from_value::<WorkflowFile>(doc).ok());
                let straight = read::<WorkflowFile>(&source);
                match (through_document, straight) {
                    (Some(document), Some(straight)) => {
                        read_both += 1;
                        assert_eq!(
                            serde_json::to_value(&straight).unwrap(),
                            serde_json::to_value(&document).unwrap(),
                            "{}",
                            path.display()
                        );
                    }
                    (None, Some(_)) => {
                        panic!("{} reads straight but not as a document", path.display())
                    }
                    (Some(_), None) => {
                        panic!("{} reads as a document but not straight", path.display())
                    }
                    (None, None) => {}
                }
            }
        }
        assert!(read_both > 50, "only {read_both} workflows read");
    }

    #[test]
    fn what_does_not_read_is_left_to_the_document() {
        for text in [
            "[stages.a]\nshell = 1\n",
            "[stages.a]\nshel = \"x\"\n",
            "[stages.a]\non_error = \"sometimes\"\n",
            "[stages.a\nshell = \"x\"\n",
        ] {
            let source = SourceFile::new("w.toml", text);
            assert!(read::<WorkflowFile>(&source).is_none(), "{text}");
        }
    }
}
