//! Write roots that read a stage's output: known once that stage has finished, admitting
//! nothing before, and `check` proves every stage that writes runs after it.

use crate::support::Test;

const FLOW: &str = r#"
[workflow]
writes = ["{{ stages.find.output.dir }}"]

[inputs.dir]
type = "string"
default = "found"

[stages.find]
template = { inline = "{{ {'dir': inputs.dir} | tojson }}" }
output = { format = "json" }

[stages.write]
after = ["find"]
uses = "fs.write"
with = { path = "{{ stages.find.output.dir }}/note.txt", content = "hi" }

[stages.stray]
after = ["write"]
if = "inputs.dir == 'found'"
uses = "fs.write"
with = { path = "elsewhere/note.txt", content = "no" }
on_error = "continue"
"#;

#[test]
fn a_root_read_from_a_stage_admits_its_folder_once_that_stage_has_run() {
    let t = Test::new();
    t.write("flow.toml", FLOW);
    let out = t.run(["run", "flow.toml"]);
    out.code(0);
    assert_eq!(t.read("found/note.txt"), "hi");
    assert!(!t.exists("elsewhere/note.txt"));
    let record = t.last_run();
    let stray = crate::support::stage(&record, "stray");
    assert_eq!(stray["status"], "failed", "{record:#}");
    let error = stray["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("outside the workflow's writes") && error.contains("/found`"),
        "{error}"
    );
}

#[test]
fn a_root_that_renders_empty_admits_nothing() {
    let t = Test::new();
    t.write("flow.toml", FLOW);
    let out = t.run(["run", "flow.toml", "--input", "dir="]);
    out.code(1);
    let record = t.last_run();
    let error = crate::support::stage(&record, "write")["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains("`writes` entry 0 admits nothing: it renders empty"),
        "{error}"
    );
    assert!(!t.exists("note.txt"));
}

#[test]
fn check_refuses_a_write_that_does_not_run_after_the_stage_its_root_reads() {
    let t = Test::new();
    t.write(
        "flow.toml",
        &FLOW
            .replace("[stages.write]\nafter = [\"find\"]\n", "[stages.write]\n")
            .replace(
                "with = { path = \"{{ stages.find.output.dir }}/note.txt\", content = \"hi\" }",
                "with = { path = \"found/note.txt\", content = \"hi\" }",
            ),
    );
    let out = t.run(["check", "flow.toml"]);
    out.code(2);
    out.stderr_has(
        "stage `write` writes, but does not run after `find`, whose output `[workflow] writes` entry 0 reads",
    );
    out.stderr_has("add `after = [\"find\"]` to `write`");
}

/// The temporary files a killed engine stranded (named with its pid) are removed when the next
/// run starts, in the write roots and the state folder; a live engine's, a fresh one and a
/// file of any other name stay.
#[test]
fn temporary_files_stranded_by_a_killed_engine_are_removed_by_the_next_run() {
    let t = crate::support::Test::new();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\nwrites = [\"out\"]\n\n\
         [stages.s]\nshell = \"printf x\"\noutput.path = \"out/x.txt\"\n",
    );
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let live = std::process::id();
    let stranded = [
        format!("out/deep/.big.bin.sg{dead}.Ab12Cd.tmp"),
        format!("state/runs/.run.json.sg{dead}.Zz99yY.tmp"),
    ];
    let kept = [
        format!("out/.big.bin.sg{live}.Ab12Cd.tmp"),
        "out/.big.bin.Ab12Cd.tmp".to_string(),
        format!("elsewhere/.big.bin.sg{dead}.Ab12Cd.tmp"),
    ];
    for path in stranded.iter().chain(&kept) {
        t.write(path, &"x".repeat(4096));
        crate::support::backdate(&t.path(path));
    }
    let fresh = format!("out/.new.bin.sg{dead}.Ab12Cd.tmp");
    t.write(&fresh, "x");
    let newer = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(t.path(&fresh))
        .and_then(|f| f.set_modified(newer))
        .unwrap();
    t.run(["run", "w.toml"]).code(0);
    crate::support::wait_for(
        "the stranded files to be removed",
        std::time::Duration::from_secs(30),
        || stranded.iter().all(|p| !t.exists(p)),
    );
    for path in kept.iter().chain(std::iter::once(&fresh)) {
        assert!(t.exists(path), "{path} was removed");
    }
    assert_eq!(t.read("out/x.txt"), "x");
}

/// A command's binary stdout reaches its `output.path` byte for byte (all 256 byte values),
/// for a stage and for each item of a `foreach`; the output itself stays text.
#[test]
fn binary_stdout_is_written_to_output_path_exactly() {
    let t = crate::support::Test::new();
    let bytes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    std::fs::write(t.path("bytes.bin"), &bytes).unwrap();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\nwrites = [\"out\"]\n\n\
         [stages.one]\ncommand = [\"cat\", \"bytes.bin\"]\noutput.path = \"out/one.bin\"\n\n\
         [stages.each]\nforeach = \"[1, 2]\"\ncommand = [\"cat\", \"bytes.bin\"]\n\
         output.path = \"out/each-{{ item }}.bin\"\n",
    );
    t.run(["run", "w.toml"]).code(0);
    for file in ["out/one.bin", "out/each-1.bin", "out/each-2.bin"] {
        assert_eq!(std::fs::read(t.path(file)).unwrap(), bytes, "{file}");
    }
}

/// A stdout that is not UTF-8 is said to be, once a stage, where the run shows its stages: its
/// output (what later stages read) has the bad bytes replaced, and `output.path` does not.
#[test]
fn a_stdout_that_is_not_utf8_is_told() {
    let t = crate::support::Test::new();
    std::fs::write(t.path("latin1.txt"), b"caf\xe9\n").unwrap();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\nwrites = [\"out\"]\n\n\
         [stages.plain]\ncommand = [\"cat\", \"latin1.txt\"]\n\n\
         [stages.kept]\ncommand = [\"cat\", \"latin1.txt\"]\noutput.path = \"out/kept.txt\"\n\n\
         [stages.each]\nforeach = \"[1, 2, 3]\"\n\
         shell = \"if [ {{ item }} = 2 ]; then cat latin1.txt; else echo ok; fi\"\n\n\
         [stages.fine]\ncommand = [\"echo\", \"café\"]\n",
    );
    let out = t.run(["run", "w.toml"]);
    out.code(0);
    out.stderr_has(
        "warning: stdout was not UTF-8: the output has each invalid byte sequence replaced \
         with U+FFFD\n",
    );
    out.stderr_has("U+FFFD; `output.path` has the bytes as written");
    out.stderr_has("warning: item 1's stdout was not UTF-8");
    assert_eq!(
        out.stderr.matches("was not UTF-8").count(),
        3,
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read(t.path("out/kept.txt")).unwrap(), b"caf\xe9\n");
}

/// Reading a file that is not UTF-8 as text names the file and the first byte that is not.
#[test]
fn a_file_that_is_not_utf8_is_named_with_the_byte() {
    let t = crate::support::Test::new();
    std::fs::write(t.path("b.bin"), b"abc\xffdef").unwrap();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\n\n[stages.r]\nuses = \"fs.read\"\nwith = { path = \"b.bin\" }\n",
    );
    t.run(["run", "w.toml"])
        .code(1)
        .stderr_has("b.bin` is not UTF-8 at byte 3");
    t.run(["run", "w.toml", "--inputs-json", "b.bin"])
        .code(2)
        .stderr_has("b.bin` is not UTF-8 at byte 3");
}
