//! A JSON value written in the style of an existing document: the bytes of every part whose
//! value did not change are kept as they were (indentation, spacing, key order, escapes, the
//! trailing newline), and only what changed is written anew, in the document's own indentation.
//!
//! An object keeps its members' order from the new value; a member the new value drops is
//! removed with its separator, one it adds is written with the spacing of its siblings. A part
//! whose type changed is written fresh, indented like the line it starts on.

use serde_json::Value;

/// One parsed value of the original text: where it lies, and its parts.
enum Node {
    Scalar(Span),
    Object(Span, Vec<Member>),
    Array(Span, Vec<Node>),
}

#[derive(Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
}

struct Member {
    key: String,
    key_span: Span,
    value: Node,
}

impl Node {
    fn span(&self) -> Span {
        match self {
            Node::Scalar(span) | Node::Object(span, _) | Node::Array(span, _) => *span,
        }
    }
}

/// `value` as text in the style of `original`, or `None` when `original` is not one JSON value.
pub(crate) fn restyle(original: &str, value: &Value) -> Option<String> {
    let mut parser = Parser {
        text: original,
        bytes: original.as_bytes(),
        at: 0,
    };
    parser.skip_ws();
    let root = parser.value()?;
    parser.skip_ws();
    if parser.at != original.len() {
        return None;
    }
    let style = Style::of(original);
    let span = root.span();
    let mut out = String::with_capacity(original.len());
    out.push_str(&original[..span.start]);
    out.push_str(&style.emit(original, &root, value));
    out.push_str(&original[span.end..]);
    Some(out)
}

struct Parser<'t> {
    text: &'t str,
    bytes: &'t [u8],
    at: usize,
}

impl Parser<'_> {
    /// From `start` to where the parser is.
    fn span_from(&self, start: usize) -> Span {
        Span {
            start,
            end: self.at,
        }
    }

    fn skip_ws(&mut self) {
        while self
            .bytes
            .get(self.at)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.at += 1;
        }
    }

    fn value(&mut self) -> Option<Node> {
        let start = self.at;
        match self.bytes.get(self.at)? {
            b'{' => {
                self.at += 1;
                let mut members = Vec::new();
                self.skip_ws();
                if self.bytes.get(self.at) == Some(&b'}') {
                    self.at += 1;
                    return Some(Node::Object(self.span_from(start), members));
                }
                loop {
                    self.skip_ws();
                    let key_start = self.at;
                    self.string()?;
                    let key_span = self.span_from(key_start);
                    let key: String = serde_json::from_str(&self.text[key_start..self.at]).ok()?;
                    self.skip_ws();
                    (self.bytes.get(self.at) == Some(&b':')).then_some(())?;
                    self.at += 1;
                    self.skip_ws();
                    let value = self.value()?;
                    members.push(Member {
                        key,
                        key_span,
                        value,
                    });
                    self.skip_ws();
                    match self.bytes.get(self.at)? {
                        b',' => self.at += 1,
                        b'}' => {
                            self.at += 1;
                            return Some(Node::Object(self.span_from(start), members));
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                self.skip_ws();
                if self.bytes.get(self.at) == Some(&b']') {
                    self.at += 1;
                    return Some(Node::Array(self.span_from(start), items));
                }
                loop {
                    self.skip_ws();
                    items.push(self.value()?);
                    self.skip_ws();
                    match self.bytes.get(self.at)? {
                        b',' => self.at += 1,
                        b']' => {
                            self.at += 1;
                            return Some(Node::Array(self.span_from(start), items));
                        }
                        _ => return None,
                    }
                }
            }
            b'"' => {
                self.string()?;
                Some(Node::Scalar(self.span_from(start)))
            }
            _ => {
                while self
                    .bytes
                    .get(self.at)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.'))
                {
                    self.at += 1;
                }
                // Checked as JSON: `tru` or `01` is not a value.
                let text = &self.text[start..self.at];
                serde_json::from_str::<Value>(text).ok()?;
                Some(Node::Scalar(self.span_from(start)))
            }
        }
    }

    /// Past one string literal (escapes skipped, not decoded).
    fn string(&mut self) -> Option<()> {
        (self.bytes.get(self.at) == Some(&b'"')).then_some(())?;
        self.at += 1;
        loop {
            match self.bytes.get(self.at)? {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    return Some(());
                }
                _ => self.at += 1,
            }
        }
    }
}

/// The document's indentation: one level's whitespace, or none for a one-line document.
struct Style {
    unit: Option<String>,
}

impl Style {
    fn of(text: &str) -> Style {
        let unit = text
            .lines()
            .skip(1)
            .map(|line| &line[..line.len() - line.trim_start().len()])
            .find(|lead| !lead.is_empty())
            .map(str::to_string);
        Style { unit }
    }

    /// The whitespace that starts the line `at` is on.
    fn indent_at(text: &str, at: usize) -> &str {
        let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let line = &text[line_start..];
        &line[..line.len() - line.trim_start().len()]
    }

    fn emit(&self, text: &str, node: &Node, value: &Value) -> String {
        let span = node.span();
        let slice = &text[span.start..span.end];
        if serde_json::from_str::<Value>(slice).ok().as_ref() == Some(value) {
            return slice.to_string();
        }
        let indent = Self::indent_at(text, span.start);
        match (node, value) {
            (Node::Object(_, members), Value::Object(map))
                if members.len() == map.len()
                    && members.iter().zip(map.keys()).all(|(m, k)| &m.key == k) =>
            {
                let parts = members
                    .iter()
                    .zip(map.values())
                    .map(|(m, v)| (m.value.span(), self.emit(text, &m.value, v)));
                patch(text, span, parts)
            }
            (Node::Array(_, items), Value::Array(values)) if items.len() == values.len() => {
                let parts = items
                    .iter()
                    .zip(values)
                    .map(|(item, v)| (item.span(), self.emit(text, item, v)));
                patch(text, span, parts)
            }
            (Node::Object(_, members), Value::Object(map)) => {
                let layout = Layout::of_object(text, span, members, indent, self);
                let entries: Vec<String> = map
                    .iter()
                    .map(|(key, v)| match members.iter().find(|m| &m.key == key) {
                        Some(m) => format!(
                            "{}{}{}",
                            &text[m.key_span.start..m.key_span.end],
                            layout.colon,
                            self.emit(text, &m.value, v)
                        ),
                        None => format!(
                            "{}{}{}",
                            Value::String(key.clone()),
                            layout.colon,
                            self.fresh(v, &layout.inner)
                        ),
                    })
                    .collect();
                layout.wrap('{', '}', &entries)
            }
            (Node::Array(_, items), Value::Array(values)) => {
                let layout = Layout::of_array(text, span, items, indent, self);
                let entries: Vec<String> = values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match items.get(i) {
                        Some(item) => self.emit(text, item, v),
                        None => self.fresh(v, &layout.inner),
                    })
                    .collect();
                layout.wrap('[', ']', &entries)
            }
            _ => self.fresh(value, indent),
        }
    }

    /// A value written anew, its later lines indented by `indent` plus the document's unit.
    fn fresh(&self, value: &Value, indent: &str) -> String {
        let Some(unit) = &self.unit else {
            return value.to_string();
        };
        let mut buffer = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
        let mut serializer = serde_json::Serializer::with_formatter(&mut buffer, formatter);
        if serde::Serialize::serialize(value, &mut serializer).is_err() {
            return value.to_string();
        }
        String::from_utf8_lossy(&buffer).replace('\n', &format!("\n{indent}"))
    }
}

/// `text[span]` with each part's span replaced by its new text (parts in order).
fn patch(text: &str, span: Span, parts: impl Iterator<Item = (Span, String)>) -> String {
    let mut out = String::new();
    let mut at = span.start;
    for (part, new) in parts {
        out.push_str(&text[at..part.start]);
        out.push_str(&new);
        at = part.end;
    }
    out.push_str(&text[at..span.end]);
    out
}

/// How a container lays out its entries: the text after its opening bracket, between entries,
/// before its closing bracket, between a key and its value, and the indentation of an entry.
struct Layout {
    open: String,
    separator: String,
    close: String,
    colon: String,
    inner: String,
}

impl Layout {
    fn of_object(text: &str, span: Span, members: &[Member], indent: &str, style: &Style) -> Self {
        let mut layout = Self::default_for(indent, style);
        if let Some(first) = members.first() {
            layout.open = text[span.start + 1..first.key_span.start].to_string();
            layout.colon = text[first.key_span.end..first.value.span().start].to_string();
            layout.inner = Style::indent_at(text, first.key_span.start).to_string();
            let last = members
                .last()
                .map_or(first.value.span(), |m| m.value.span());
            layout.close = text[last.end..span.end - 1].to_string();
            layout.separator = match members.get(1) {
                Some(second) => text[first.value.span().end..second.key_span.start].to_string(),
                None => Self::lone_separator(&layout.open),
            };
        }
        layout
    }

    /// Between entries, when the original had only one: a new line as the first entry has, or
    /// `, ` on one line.
    fn lone_separator(open: &str) -> String {
        if open.contains('\n') {
            format!(",{open}")
        } else {
            ", ".to_string()
        }
    }

    fn of_array(text: &str, span: Span, items: &[Node], indent: &str, style: &Style) -> Self {
        let mut layout = Self::default_for(indent, style);
        if let Some(first) = items.first() {
            let first_span = first.span();
            layout.open = text[span.start + 1..first_span.start].to_string();
            layout.inner = Style::indent_at(text, first_span.start).to_string();
            let last = items.last().map_or(first_span, Node::span);
            layout.close = text[last.end..span.end - 1].to_string();
            layout.separator = match items.get(1) {
                Some(second) => text[first_span.end..second.span().start].to_string(),
                None => Self::lone_separator(&layout.open),
            };
        }
        layout
    }

    /// The layout of an empty container: the document's indentation one level in.
    fn default_for(indent: &str, style: &Style) -> Self {
        match &style.unit {
            Some(unit) => {
                let inner = format!("{indent}{unit}");
                Layout {
                    open: format!("\n{inner}"),
                    separator: format!(",\n{inner}"),
                    close: format!("\n{indent}"),
                    colon: ": ".to_string(),
                    inner,
                }
            }
            None => Layout {
                open: String::new(),
                separator: ",".to_string(),
                close: String::new(),
                colon: ":".to_string(),
                inner: String::new(),
            },
        }
    }

    fn wrap(&self, open: char, close: char, entries: &[String]) -> String {
        if entries.is_empty() {
            return format!("{open}{close}");
        }
        format!(
            "{open}{}{}{}{close}",
            self.open,
            entries.join(&self.separator),
            self.close
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::restyle;

    #[test]
    fn unchanged_is_byte_for_byte() {
        let text = "{\n    \"b\": 1,\n    \"a\": [1, 2],   \"c\": \"\\u00e9\"\n}";
        let value: serde_json::Value = serde_json::from_str(text).expect("JSON");
        assert_eq!(restyle(text, &value).as_deref(), Some(text));
    }

    #[test]
    fn a_changed_value_is_the_only_change() {
        let text = "{\n    \"z\": {\"state\": \"reachable\",  \"n\": null},\n    \"a\": true\n}";
        let value = json!({ "z": { "state": "moved", "n": null }, "a": true });
        assert_eq!(
            restyle(text, &value).as_deref(),
            Some("{\n    \"z\": {\"state\": \"moved\",  \"n\": null},\n    \"a\": true\n}")
        );
    }

    #[test]
    fn members_dropped_and_added_take_their_siblings_spacing() {
        let text = "{\n\t\"id\": \"x\",\n\t\"chunks\": [1],\n\t\"life\": {\n\t\t\"state\": \"reachable\"\n\t}\n}\n";
        let value = json!({ "id": "x", "life": { "state": "moved", "proposed": { "url": "u" } } });
        assert_eq!(
            restyle(text, &value).as_deref(),
            Some("{\n\t\"id\": \"x\",\n\t\"life\": {\n\t\t\"state\": \"moved\",\n\t\t\"proposed\": {\n\t\t\t\"url\": \"u\"\n\t\t}\n\t}\n}\n")
        );
    }

    #[test]
    fn a_one_line_document_stays_on_one_line() {
        let text = "{\"a\": 1, \"b\": [true]}";
        let value = json!({ "a": 2, "b": [true, false], "c": {} });
        assert_eq!(
            restyle(text, &value).as_deref(),
            Some("{\"a\": 2, \"b\": [true, false], \"c\": {}}")
        );
    }

    #[test]
    fn not_json_is_none() {
        assert_eq!(restyle("{ nope", &json!({})), None);
        assert_eq!(restyle("{} {}", &json!({})), None);
    }
}
