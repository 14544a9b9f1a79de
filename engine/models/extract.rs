//! Finding the JSON document in a model's reply, which may be bare, fenced in a ```json block, or
//! wrapped in prose. A scanner that knows JSON strings finds balanced `{...}`/`[...]` spans, so
//! braces inside strings and escaped quotes cannot mislead it the way a regex would be misled.

/// The JSON document in a model reply: the content of a fenced block that parses (a block labeled
/// `json` first), else the whole reply when it parses, else the first balanced `{...}` or `[...]`
/// that parses. `None` when there is none.
pub(crate) fn extract_json(text: &str) -> Option<&str> {
    let fences = fenced_blocks(text);
    let labeled = fences
        .iter()
        .filter(|(label, _)| label.eq_ignore_ascii_case("json"));
    let others = fences
        .iter()
        .filter(|(label, _)| !label.eq_ignore_ascii_case("json"));
    for (_, content) in labeled.chain(others) {
        if parses(content) {
            return Some(content);
        }
    }
    let trimmed = text.trim();
    if parses(trimmed) {
        return Some(trimmed);
    }
    first_balanced(text)
}

fn parses(candidate: &str) -> bool {
    !candidate.is_empty() && serde_json::from_str::<serde::de::IgnoredAny>(candidate).is_ok()
}

/// Every fenced code block as (info string, trimmed content). A fence is three or more backticks
/// at the start of a line; an unclosed block runs to the end of the text.
fn fenced_blocks(text: &str) -> Vec<(&str, &str)> {
    let mut blocks = Vec::new();
    let mut lines = line_spans(text).into_iter();
    while let Some((start, end)) = lines.next() {
        let line = &text[start..end];
        let Some(ticks) = fence_ticks(line) else {
            continue;
        };
        let label = line.trim_start()[ticks..].trim();
        let content_start = end_of_line(text, end);
        let mut content_end = text.len();
        for (inner_start, inner_end) in lines.by_ref() {
            let inner = &text[inner_start..inner_end];
            if fence_ticks(inner).is_some_and(|closing| closing >= ticks)
                && inner.trim_start()[closing_len(inner)..].trim().is_empty()
            {
                content_end = inner_start;
                break;
            }
        }
        let content_end = content_end.max(content_start);
        blocks.push((label, text[content_start..content_end].trim()));
    }
    blocks
}

/// (start, end) byte offsets of each line, without its line break.
fn line_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (index, byte) in text.bytes().enumerate() {
        if byte == b'\n' {
            spans.push((start, index));
            start = index + 1;
        }
    }
    if start < text.len() {
        spans.push((start, text.len()));
    }
    spans
}

fn end_of_line(text: &str, end: usize) -> usize {
    if text[end..].starts_with('\n') {
        end + 1
    } else {
        end
    }
}

/// The number of backticks opening a fence line (at most three spaces of indent), if it is one.
fn fence_ticks(line: &str) -> Option<usize> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let ticks = closing_len(line);
    (ticks >= 3).then_some(ticks)
}

fn closing_len(line: &str) -> usize {
    line.trim_start()
        .bytes()
        .take_while(|&byte| byte == b'`')
        .count()
}

/// The first balanced `{...}` or `[...]` that parses as JSON.
fn first_balanced(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(offset) = bytes[from..]
        .iter()
        .position(|&byte| byte == b'{' || byte == b'[')
    {
        let start = from + offset;
        if let Some(end) = balanced_end(bytes, start) {
            let candidate = &text[start..end];
            if parses(candidate) {
                return Some(candidate);
            }
        }
        from = start + 1;
    }
    None
}

/// The end (exclusive) of the bracketed value opening at `start`, skipping over JSON strings;
/// `None` when the brackets never balance or close in the wrong order.
fn balanced_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut expected = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (index, &byte) in bytes.iter().enumerate().skip(start) {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' => expected.push(b'}'),
            b'[' => expected.push(b']'),
            b'}' | b']' => {
                if expected.pop() != Some(byte) {
                    return None;
                }
                if expected.is_empty() {
                    return Some(index + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::extract_json;

    #[test]
    fn bare_object() {
        assert_eq!(extract_json("  {\"a\": 1}\n"), Some("{\"a\": 1}"));
    }

    #[test]
    fn fenced_block_is_preferred_over_earlier_json() {
        let text = "The old value was {\"v\": 1}.\n\n```json\n{\"v\": 2}\n```\nDone.";
        assert_eq!(extract_json(text), Some("{\"v\": 2}"));
    }

    #[test]
    fn labeled_fence_beats_unlabeled() {
        let text = "```\n[1, 2]\n```\n\n```JSON\n{\"ok\": true}\n```";
        assert_eq!(extract_json(text), Some("{\"ok\": true}"));
    }

    #[test]
    fn unlabeled_fence_is_used() {
        let text = "Here:\n```\n{\"ok\": true}\n```";
        assert_eq!(extract_json(text), Some("{\"ok\": true}"));
    }

    #[test]
    fn prose_around() {
        let text =
            "Sure! Here is the result: {\"update\": false, \"reason\": \"none\"} Hope it helps.";
        assert_eq!(
            extract_json(text),
            Some("{\"update\": false, \"reason\": \"none\"}")
        );
    }

    #[test]
    fn braces_inside_strings() {
        let text =
            "Result: {\"code\": \"fn main() { let x = [1, 2; }\", \"n\": {\"m\": 1}} trailing }";
        assert_eq!(
            extract_json(text),
            Some("{\"code\": \"fn main() { let x = [1, 2; }\", \"n\": {\"m\": 1}}")
        );
    }

    #[test]
    fn escaped_quotes() {
        let text = r#"Answer {"quote": "she said \"}{\" loudly", "b": "\\"} end"#;
        assert_eq!(
            extract_json(text),
            Some(r#"{"quote": "she said \"}{\" loudly", "b": "\\"}"#)
        );
    }

    #[test]
    fn arrays() {
        let text = "The terms are:\n[{\"t\": \"a\"}, {\"t\": \"b]\"}]\nThat is all.";
        assert_eq!(
            extract_json(text),
            Some("[{\"t\": \"a\"}, {\"t\": \"b]\"}]")
        );
    }

    #[test]
    fn skips_balanced_spans_that_do_not_parse() {
        let text = "Set {x} to this: {\"x\": 1}";
        assert_eq!(extract_json(text), Some("{\"x\": 1}"));
    }

    #[test]
    fn fenced_block_that_does_not_parse_falls_back_to_scanning() {
        let text = "```json\n{\"a\": 1,}\n```\nCorrected: {\"a\": 1}";
        assert_eq!(extract_json(text), Some("{\"a\": 1}"));
    }

    #[test]
    fn none() {
        assert_eq!(extract_json("no json here"), None);
        assert_eq!(extract_json("broken {\"a\": "), None);
        assert_eq!(extract_json("mismatched {\"a\": [1}]"), None);
        assert_eq!(extract_json(""), None);
    }

    #[test]
    fn multibyte_text_around() {
        let text = "Résumé — voilà: {\"mot\": \"été\"} ✓";
        assert_eq!(extract_json(text), Some("{\"mot\": \"été\"}"));
    }
}
