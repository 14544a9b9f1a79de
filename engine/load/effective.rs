//! The merged document as it is shown by `show --effective`: annotated TOML (each key with the
//! file and line it came from) or JSON with an origin per pointer.

use serde_json::{Map, Value};

use super::{pointer_segment, RawWorkflow};

impl RawWorkflow {
    /// The merged document as TOML, each key annotated with where it came from.
    pub fn effective_toml(&self) -> String {
        let mut out = format!(
            "# effective workflow `{}`\n# files: {}\n",
            self.name,
            self.sources
                .iter()
                .map(|s| s.path.display().to_string())
                .collect::<Vec<_>>()
                .join(" <- ")
        );
        let origin = |pointer: &str| -> String {
            self.origins()
                .get(pointer)
                .map(|o| {
                    let source = &self.sources[o.source()];
                    let (line, _) = source.line_col(o.key().start);
                    format!("  # {}:{line}", source.path.display())
                })
                .unwrap_or_default()
        };
        let Value::Object(sections) = &self.doc else {
            return out;
        };
        for (section, value) in sections {
            let Value::Object(entries) = value else {
                continue;
            };
            let nested = matches!(section.as_str(), "inputs" | "stages");
            if nested {
                for (name, table) in entries {
                    let Value::Object(keys) = table else { continue };
                    let pointer = format!("/{section}/{}", pointer_segment(name));
                    out.push_str(&format!("\n[{section}.{name}]{}\n", origin(&pointer)));
                    for (key, value) in keys {
                        let key_pointer = format!("{pointer}/{}", pointer_segment(key));
                        out.push_str(&format!(
                            "{key} = {}{}\n",
                            toml_value(value),
                            origin(&key_pointer)
                        ));
                    }
                }
            } else {
                out.push_str(&format!("\n[{section}]\n"));
                for (key, value) in entries {
                    let key_pointer = format!("/{section}/{}", pointer_segment(key));
                    out.push_str(&format!(
                        "{key} = {}{}\n",
                        toml_value(value),
                        origin(&key_pointer)
                    ));
                }
            }
        }
        out
    }

    /// The merged document as JSON: `workflow`, `document`, `origins` (pointer -> file, line,
    /// column, sorted by pointer) and `files` (the chain, the top overlay first). The caller
    /// adds the document's `version`.
    pub fn effective_json(&self) -> Map<String, Value> {
        let mut origins = Map::new();
        let mut pointers: Vec<&String> = self.origins().keys().collect();
        pointers.sort();
        for pointer in pointers {
            let origin = &self.origins()[pointer];
            let source = &self.sources[origin.source()];
            let (line, column) = source.line_col(origin.key().start);
            origins.insert(
                pointer.clone(),
                serde_json::json!({ "file": source.path.display().to_string(), "line": line, "column": column }),
            );
        }
        let mut out = Map::new();
        out.insert("workflow".into(), self.name.clone().into());
        out.insert("document".into(), self.doc.clone());
        out.insert("origins".into(), origins.into());
        out.insert(
            "files".into(),
            self.sources
                .iter()
                .map(|s| Value::String(s.path.display().to_string()))
                .collect::<Vec<_>>()
                .into(),
        );
        out
    }
}

fn toml_value(value: &Value) -> String {
    match toml::Value::try_from(value) {
        Ok(toml::Value::String(s)) if s.contains('\n') => format!("'''\n{s}'''"),
        Ok(v) => v.to_string(),
        Err(_) => value.to_string(),
    }
}
