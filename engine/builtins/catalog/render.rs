//! Writing a catalog back as text: deterministic, so rendering a rendered catalog is byte-identical.

use super::document::{BodyLine, Catalog, Entry, STRAY_MARKER};
use super::format::Format;

fn join_words<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    words
        .into_iter()
        .filter(|word| !word.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn render_markers(markers: &[String]) -> Vec<String> {
    markers
        .iter()
        .map(|marker| format!("<!-- {marker} -->"))
        .collect()
}

pub(super) fn render_entry(entry: &Entry, format: &Format) -> String {
    let markers = render_markers(&entry.markers);
    let on_heading = entry
        .layout
        .as_ref()
        .is_some_and(|layout| !layout.contains(&BodyLine::Key(0)));
    let mut heading = vec!["###", entry.concept.as_str()];
    if on_heading {
        heading.extend(markers.iter().map(String::as_str));
    }
    let mut lines = vec![join_words(heading)];
    let key_line = |key: usize| {
        let value = entry.fields[key].render();
        let mut words = vec![value.as_str()];
        if key == 0 {
            words.extend(markers.iter().map(String::as_str));
        }
        let content = join_words(words);
        let label = &format.keys[key].label;
        if content.is_empty() {
            format!("- **{label}**:")
        } else {
            format!("- **{label}**: {content}")
        }
    };
    match &entry.layout {
        None => lines.extend((0..format.keys.len()).map(key_line)),
        Some(layout) => lines.extend(layout.iter().map(|line| match line {
            BodyLine::Key(key) => key_line(*key),
            BodyLine::Raw(raw) => raw.clone(),
        })),
    }
    lines.join("\n")
}

/// Lines outside any entry, under the line that marks them.
fn render_stray(lines: &[String]) -> String {
    std::iter::once(STRAY_MARKER.to_owned())
        .chain(lines.iter().cloned())
        .collect::<Vec<_>>()
        .join("\n")
}

pub(super) fn render_area_heading(name: &str) -> String {
    join_words(["##", name])
}

/// Header, then every non-empty area and its entries, one blank line between blocks, one
/// newline at the end.
pub(super) fn render(catalog: &Catalog, format: &Format) -> String {
    let mut blocks = vec![format.header.clone()];
    if !catalog.preamble.is_empty() {
        blocks.push(render_stray(&catalog.preamble));
    }
    for area in catalog.areas.iter().filter(|area| !area.is_empty()) {
        blocks.push(render_area_heading(&area.name));
        if !area.stray.is_empty() {
            blocks.push(render_stray(&area.stray));
        }
        blocks.extend(area.entries.iter().map(|entry| render_entry(entry, format)));
    }
    blocks.join("\n\n") + "\n"
}
