//! A large workflow file read in parts, on the cores at hand.
//!
//! Parsing the TOML of 10,000 stages is about 40% of `check`, on one core, and the parser holds the
//! tokens and events of all the text it parses at once: about 22 bytes for each byte of text,
//! 17.7 MB for the 815 KB of the benchmark's 10,000 stages, which set `check`'s peak memory. A
//! workflow file is mostly its `[stages.<id>]` tables, and from the first of a run of them to the
//! end of the file each part that starts at one of those headers is a TOML document of its own
//! whose only key is `stages`. The text is cut at such headers into parts of about [`PART_BYTES`],
//! the parts are parsed and read by a thread a core, each taking the next part when done with one,
//! and their stages joined in file order: the parser's tokens are never more than a part's a
//! thread.
//!
//! The cut is taken only where it cannot change what the file means; anything else reads the
//! whole file at once. A line of the text that opens with `[` is a header or lies inside a
//! multi-line string or array. [`parts`] cuts only at lines that look like a stage's header,
//! with every such line after the cut one too, and it refuses a file that could define
//! `stages` otherwise (a key `stages = ...`, `[[stages]]`, a quoted or spaced header). A cut
//! that lands inside a string or an array leaves the part before it unclosed, which does not
//! parse, and the whole file is read instead. A part that parses on its own thus ends where a
//! top-level expression ends, and the ones after it can only add stage tables. Those must be
//! new stages: an id in two parts (which TOML may allow, e.g. `[stages.a.cache]` before
//! `[stages.a]`) also reads the whole file.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::format::WorkflowFile;

/// Files smaller than this, or with fewer stage headers, are read at once: below them, the
/// threads cost more than they save.
const SMALLEST_FILE: usize = 256 * 1024;
const FEWEST_HEADERS: usize = 2_000;

/// About how long a part is (it ends at the first stage header past this length). Parsing a
/// part takes about 22 times its length while it lasts; a part is a few hundred stages.
const PART_BYTES: usize = 32 * 1024;

/// The byte ranges of `text`, in order and covering it, to parse apart; `None` to read it whole.
pub(crate) fn parts(text: &str) -> Option<Vec<Range<usize>>> {
    if text.len() < SMALLEST_FILE {
        return None;
    }
    // Where each line of a stage header starts, from the last header of another kind on.
    let mut cuts: Vec<usize> = Vec::new();
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let at = start;
        start += line.len();
        let trimmed = line.trim_start_matches([' ', '\t']);
        match line_kind(trimmed) {
            Line::Other => {}
            Line::StageHeader => cuts.push(at),
            Line::Header => cuts.clear(),
            Line::Unsure => return None,
        }
    }
    if cuts.len() < FEWEST_HEADERS {
        return None;
    }
    // The first part also holds everything before the run of stage headers.
    let mut ranges = Vec::with_capacity(text.len() / PART_BYTES + 1);
    let mut from = 0;
    for &cut in &cuts[1..] {
        if cut - from >= PART_BYTES {
            ranges.push(from..cut);
            from = cut;
        }
    }
    ranges.push(from..text.len());
    (ranges.len() > 1).then_some(ranges)
}

/// What a line says about cutting, from its first character that is not a blank.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// Neither a header nor a key `stages`.
    Other,
    /// `[stages.<id>...]` or `[[stages.<id>...]]`: a cut may fall here.
    StageHeader,
    /// Another header: no cut before it.
    Header,
    /// Could define `stages` in a way a later part could not add to: no cut at all.
    Unsure,
}

fn line_kind(trimmed: &str) -> Line {
    if let Some(header) = trimmed.strip_prefix('[') {
        let name = header.strip_prefix('[').unwrap_or(header);
        return if name.starts_with("stages.") {
            Line::StageHeader
        } else if header.starts_with("stages]") {
            // `[stages]` itself: a table later parts add stages to.
            Line::Header
        } else if name.starts_with(['"', '\'', ' ', '\t']) || name.starts_with("stages") {
            Line::Unsure
        } else {
            Line::Header
        };
    }
    let key = trimmed
        .strip_prefix("\"stages\"")
        .or_else(|| trimmed.strip_prefix("'stages'"))
        .or_else(|| trimmed.strip_prefix("stages"));
    match key {
        Some(rest) if rest.starts_with([' ', '\t', '.', '=']) => Line::Unsure,
        _ => Line::Other,
    }
}

/// The workflow read from `text` in `ranges` by `threads` threads side by side, with `read`
/// reading one part; `None` when a part does not read or two share a stage. The parts after the
/// first hold stage tables only ([`parts`] cuts after every other header), so only their stages
/// are taken.
pub(crate) fn read_parts(
    text: &str,
    ranges: &[Range<usize>],
    threads: usize,
    read: impl Fn(&str) -> Option<WorkflowFile> + Sync,
) -> Option<WorkflowFile> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    // A thread reads the next part not taken yet until none is left (or one did not read).
    let work = || {
        let mut read_here = Vec::new();
        while !failed.load(Ordering::Relaxed) {
            let index = next.fetch_add(1, Ordering::Relaxed);
            let Some(range) = ranges.get(index) else {
                break;
            };
            match read(&text[range.clone()]) {
                Some(file) => read_here.push((index, file)),
                None => failed.store(true, Ordering::Relaxed),
            }
        }
        read_here
    };
    let mut files = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads.min(ranges.len()))
            .map(|_| scope.spawn(work))
            .collect();
        let mut files = work();
        for helper in helpers {
            match helper.join() {
                Ok(read_there) => files.extend(read_there),
                Err(_) => failed.store(true, Ordering::Relaxed),
            }
        }
        // The pages this thread's parts were parsed in, given back at once: the parser's tokens
        // and events, freed part by part, are of other sizes than what the check goes on to
        // allocate on this thread, so their pages are not used again; under the delay the
        // reading sets for returning freed pages (1 ms, `return_freed_pages_late` in main.rs),
        // a thread busy checking returned them in some runs and held them through the check's
        // peak in others. At 10,000 stages, the released build, 21 `check`s a shape: the
        // highest peak 24.7 / 24.1 / 22.5 MB (wide / layers / chain) before, 22.5 / 23.2 /
        // 21.7 after, in the same time.
        crate::floor::heap::collect_own(true);
        files
    });
    if failed.load(Ordering::Relaxed) || files.len() != ranges.len() {
        return None;
    }
    files.sort_unstable_by_key(|(index, _)| *index);
    let stages = files
        .iter()
        .map(|(_, file)| file.stages.len())
        .sum::<usize>();
    let mut files = files.into_iter().map(|(_, file)| file);
    let mut file = files.next()?;
    file.stages.reserve(stages - file.stages.len());
    for other in files {
        for (id, stage) in other.stages {
            if file.stages.insert(id, stage).is_some() {
                return None;
            }
        }
    }
    Some(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stages(n: usize) -> String {
        (0..n)
            .map(|i| format!("[stages.s{i}]\nshell = \"echo {i}\"\n\n"))
            .collect()
    }

    fn read_whole(text: &str) -> Option<WorkflowFile> {
        toml::from_str(text).ok()
    }

    #[test]
    fn a_large_file_is_cut_at_stage_headers_into_parts_of_about_the_size_set() {
        let text = format!("[workflow]\ndescription = \"x\"\n\n{}", stages(8_000));
        let ranges = parts(&text).expect("cut");
        let whole_parts = text.len() / PART_BYTES;
        assert!(
            (whole_parts..=whole_parts + 1).contains(&ranges.len()),
            "{ranges:?}"
        );
        assert_eq!(ranges[0].start, 0);
        assert_eq!(ranges.last().map(|r| r.end), Some(text.len()));
        for (before, after) in ranges.iter().zip(&ranges[1..]) {
            assert_eq!(before.end, after.start);
            assert!(text[after.clone()].starts_with("[stages.s"));
            // A part ends at the first header past the size: within a stage of it.
            assert!(
                (PART_BYTES..PART_BYTES + 40).contains(&before.len()),
                "{before:?}"
            );
        }
    }

    #[test]
    fn read_in_parts_is_read_whole() {
        let text = format!(
            "[workflow]\ndescription = \"x\"\n\n[inputs.word]\ntype = \"string\"\n\n{}\
             [stages.last]\nshell = \"echo\"\n[stages.last.cache]\nkey = \"a\"\n\
             [[stages.last.assert]]\nthat = \"true\"\n",
            stages(8_000)
        );
        let ranges = parts(&text).expect("cut");
        let whole = read_whole(&text).expect("reads");
        for threads in [1, 2, 3, 64] {
            let split = read_parts(&text, &ranges, threads, read_whole).expect("reads");
            assert_eq!(
                serde_json::to_value(&split).unwrap(),
                serde_json::to_value(&whole).unwrap(),
                "{threads} threads"
            );
        }
        let split = read_parts(&text, &ranges, 2, read_whole).expect("reads");
        assert_eq!(split.stages.keys().last().map(String::as_str), Some("last"));
        assert_eq!(
            split.stages.get_index(1).map(|(id, _)| id.as_str()),
            Some("s1")
        );
    }

    #[test]
    fn a_small_file_is_not_cut() {
        assert_eq!(parts(&stages(100)), None);
        // Enough headers, too few bytes.
        let short: String = (0..3_000).map(|i| format!("[stages.s{i}]\n")).collect();
        assert_eq!(parts(&short), None);
    }

    #[test]
    fn no_cut_before_a_header_of_another_table() {
        let text = format!("{}[outputs]\nx = \"y\"\n", stages(8_000));
        assert_eq!(parts(&text), None);
        // After the last one, the stages are cut as usual.
        let text = format!("[outputs]\nx = \"y\"\n{}", stages(8_000));
        assert!(parts(&text).is_some());
    }

    #[test]
    fn stages_defined_otherwise_are_never_cut() {
        for head in [
            "stages = { a = { shell = \"x\" } }\n",
            "stages.a.shell = \"x\"\n",
            "\"stages\".a.shell = \"x\"\n",
            "[[stages]]\n",
            "[ stages.a ]\n",
            "[\"stages\".a]\n",
            "[stages .a]\n",
        ] {
            let text = format!("{head}{}", stages(8_000));
            assert_eq!(parts(&text), None, "{head}");
        }
        let text = format!("[stages]\n{}", stages(8_000));
        assert!(parts(&text).is_some());
    }

    #[test]
    fn a_stage_in_two_parts_or_a_part_that_does_not_parse_reads_nothing() {
        // `s0` again at the end: TOML allows its subtable, but it is not a new stage.
        let text = format!("{}[stages.s0.cache]\nkey = \"k\"\n", stages(8_000));
        let ranges = parts(&text).expect("cut");
        assert!(read_whole(&text).is_some());
        assert!(read_parts(&text, &ranges, 2, read_whole).is_none());

        // A cut inside a multi-line string leaves the first part unclosed.
        let text = format!(
            "[stages.a]\nshell = \"\"\"\n{}\"\"\"\n{}",
            stages(8_000),
            stages(10).replace("[stages.s", "[stages.t")
        );
        let whole = read_whole(&text).expect("reads");
        assert_eq!(whole.stages.len(), 11);
        let ranges = parts(&text).expect("lines inside the string look like headers");
        assert!(read_parts(&text, &ranges, 2, read_whole).is_none());
    }
}
