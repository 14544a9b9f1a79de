//! Every input under `fuzz/regressions/<target>/` (what a fuzzer once crashed on) and the seed
//! corpus under `fuzz/corpus/<target>/`, replayed through the fuzz targets on stable Rust: a
//! panic fixed stays fixed.

use std::path::Path;

#[allow(unreachable_pub, dead_code, unused_imports)]
#[path = "../fuzz/src/targets.rs"]
mod targets;

fn replay(folder: &str) -> usize {
    let root = crate::support::repo_root().join("fuzz").join(folder);
    let mut replayed = 0;
    let mut failures = Vec::new();
    for (name, target) in targets::TARGETS {
        let Ok(entries) = std::fs::read_dir(root.join(name)) else {
            continue;
        };
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            let bytes = std::fs::read(&path).expect("read an input");
            if std::panic::catch_unwind(|| target(&bytes)).is_err() {
                failures.push(display(&path));
            }
            replayed += 1;
        }
    }
    assert!(failures.is_empty(), "inputs that panic: {failures:#?}");
    replayed
}

fn display(path: &Path) -> String {
    path.strip_prefix(crate::support::repo_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn no_regression_input_panics() {
    let replayed = replay("regressions");
    assert!(replayed > 0, "no regression inputs found");
}

#[test]
fn no_seed_input_panics() {
    let replayed = replay("corpus");
    assert!(replayed > 0, "no seed inputs found");
}
