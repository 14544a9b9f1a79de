//! What a fire of the `context-update` hook costs: engine time and the bytes sent to each model.
//!
//! `cargo bench --bench context_update [-- --runs 5 --sizes 1,80]`
//!
//! On a real-shaped transcript of each size in MB (turns as Claude Code 2.1 writes them: queue
//! operations, attachments, thinking, tool calls with kilobytes of results, progress lines, the
//! bookkeeping lines, and a short prose turn at the end), it times, as the median wall time of
//! `--runs` runs of the release binary as a hook (the payload on stdin, `$CLAUDE_PROJECT_DIR`
//! set):
//!
//! - `toggle off`: CLAUDE.md without the toggle (the cheapest early exit);
//! - `debounced`: the lexicon was written a minute ago;
//! - `tool-only`: the lines after the cursor are tool traffic only (no model call);
//! - `full fire`: the last turn after the cursor, the gate and the writer answering at once
//!   (command aliases printing a canned reply), the lexicon merged and written;
//! - `first fire`: no cursor yet: the whole file read, then a full fire on its newest words.
//!
//! Then, for the bytes sent to models per fire, it replays `tests/fixtures/context-update/
//! cli-2.1-turns.jsonl` turn by turn (a hook after each turn, as Claude Code fires it) and the
//! generated transcripts, and prints what the gate and the writer were sent beside what v1 sent:
//! its writer prompt plus the last 500 lines of the transcript, on every fire. `--session PATH`
//! replays another session transcript the same way (a real one, for instance).
//!
//! The binary is `STAGEGRAPH_BIN` when set; otherwise the bench builds it with
//! `cargo build --release --bin stagegraph`. It asserts nothing about time.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// v1's writer prompt (the wrapper's fallback), sent with the transcript's last 500 lines.
const V1_PROMPT: &str = "/rocket:context-update\n\nThe transcript of the current Claude Code session is provided on stdin (JSONL, one event per line). Run the context-update workflow against the remaining content and the project lexicon at `.roc/rocket/lexicon.md`.";

const GATE_REPLY: &str = r#"{"update": true, "candidates": ["Propagation Bench"]}"#;
const WRITER_REPLY: &str = r#"{"entries": [{"area": "Domain", "concept": "Propagation Bench", "definition": "The seed tray rack the Grower owns.", "aliases": ["tray rack"], "relations": [], "source": "conversation 2026-12-01"}]}"#;

fn main() {
    let mut runs = 5usize;
    let mut sizes: Vec<usize> = vec![1, 80];
    let mut sessions: Vec<PathBuf> = vec![PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/context-update/cli-2.1-turns.jsonl")];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).unwrap_or(runs),
            "--sizes" => {
                sizes = args
                    .next()
                    .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
                    .unwrap_or(sizes);
            }
            // Another session transcript to replay turn by turn (a real one, for instance).
            "--session" => sessions.extend(args.next().map(PathBuf::from)),
            _ => {}
        }
    }
    let bin = binary();
    let work = tempfile::Builder::new()
        .prefix("stagegraph-bench-")
        .tempdir()
        .expect("a temporary folder");
    println!("context-update, one fire as a Stop hook (median of {runs} runs, wall time of the process)\n");
    println!(
        "| transcript | toggle off | debounced | tool-only | full fire | first fire (whole file) |"
    );
    println!("|---|---|---|---|---|---|");
    for mb in &sizes {
        let bench = Bench::new(&bin, work.path(), *mb);
        let cells: Vec<String> = [
            Scenario::ToggleOff,
            Scenario::Debounced,
            Scenario::ToolOnly,
            Scenario::FullFire,
            Scenario::FirstFire,
        ]
        .iter()
        .map(|scenario| format!("{:.1} ms", bench.median_ms(*scenario, runs)))
        .collect();
        println!(
            "| {} MB ({} lines) | {} |",
            mb,
            bench.lines,
            cells.join(" | ")
        );
    }

    println!(
        "\nbytes sent to models per fire, beside v1 (writer prompt + last 500 lines, every fire)\n"
    );
    println!("| transcript, fire | gate | writer | total | v1 | saved |");
    println!("|---|---|---|---|---|---|");
    for session in &sessions {
        let turns = Bench::replay_turns(&bin, work.path(), session);
        let name = session
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (mut total_new, mut total_v1) = (0usize, 0usize);
        for (turn, (gate, writer, v1)) in turns.iter().enumerate() {
            total_new += gate + writer;
            total_v1 += v1;
            println!(
                "| {name}, fire {} | {gate} | {writer} | {} | {v1} | {} |",
                turn + 1,
                gate + writer,
                saved(gate + writer, *v1)
            );
        }
        println!(
            "| {name}, all {} fires | | | {total_new} | {total_v1} | {} |",
            turns.len(),
            saved(total_new, total_v1)
        );
    }
    for mb in &sizes {
        let bench = Bench::new(&bin, work.path(), *mb);
        let (gate, writer) = bench.full_fire_bytes();
        let v1 = bench.v1_bytes();
        println!(
            "| {mb} MB, full fire (last turn) | {gate} | {writer} | {} | {v1} | {} |",
            gate + writer,
            saved(gate + writer, v1)
        );
        println!("| {mb} MB, tool-only fire | 0 | 0 | 0 | {v1} | 100% |");
    }
}

fn saved(new: usize, old: usize) -> String {
    if old == 0 {
        return "n/a".into();
    }
    format!("{:.0}%", 100.0 * (1.0 - new as f64 / old as f64))
}

fn binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("STAGEGRAPH_BIN") {
        return PathBuf::from(bin);
    }
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "--bin", "stagegraph"])
        .status()
        .expect("cargo build");
    assert!(status.success(), "cargo build --release failed");
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/stagegraph")
}

#[derive(Clone, Copy)]
enum Scenario {
    ToggleOff,
    Debounced,
    ToolOnly,
    FullFire,
    FirstFire,
}

struct Bench {
    bin: PathBuf,
    project: PathBuf,
    transcript: PathBuf,
    lines: usize,
    /// Lines before the last prose turn, and before the trailing tool-only lines.
    before_last_turn: usize,
    before_tools: usize,
}

/// One turn of a working session in Claude Code 2.1's shapes: the user's message, the model's
/// thinking and tool calls with large results, progress lines, bookkeeping.
fn working_turn(i: usize, out: &mut Vec<Value>) {
    let sid = "3c9e2f71-5a0b-4d8e-9f13-7b2a6c4d1e08";
    let said = format!("Turn {i}: read the bench module and fix the watering schedule.");
    out.push(json!({"type": "queue-operation", "operation": "enqueue", "timestamp": "2026-12-01T09:00:00.000Z", "sessionId": sid, "content": said}));
    out.push(json!({"type": "queue-operation", "operation": "dequeue", "timestamp": "2026-12-01T09:00:00.001Z", "sessionId": sid}));
    out.push(json!({"parentUuid": null, "isSidechain": false, "type": "user", "message": {"role": "user", "content": said}, "uuid": format!("u-{i}"), "timestamp": "2026-12-01T09:00:00.002Z", "cwd": "/home/dev/greenhouse", "sessionId": sid, "version": "2.1.332"}));
    out.push(json!({"parentUuid": format!("u-{i}"), "isSidechain": false, "type": "attachment", "attachment": {"type": "model", "text": "You are powered by Sonnet."}, "rendered": [{"content": "<system-reminder>\nYou are powered by Sonnet.\n</system-reminder>"}], "uuid": format!("m-{i}"), "sessionId": sid}));
    let file = "pub fn water(bench: &mut Bench, at: Instant) -> Result<(), Error> { bench.valves.open(at)?; Ok(()) }\n".repeat(45);
    for call in 0..3 {
        let id = format!("toolu_{i}_{call}");
        out.push(json!({"parentUuid": null, "isSidechain": false, "type": "assistant", "message": {"id": format!("msg_{i}_{call}"), "type": "message", "role": "assistant", "model": "claude-sonnet-5-5", "content": [
            {"type": "thinking", "thinking": "I should look at the valves before changing the schedule.", "signature": "EqQBCkYIBxgCKkB".repeat(20)},
            {"type": "tool_use", "id": id, "name": "Read", "input": {"file_path": format!("src/bench_{call}.rs")}}
        ], "stop_reason": "tool_use", "usage": {"input_tokens": 1200, "output_tokens": 80}}, "uuid": format!("a-{i}-{call}"), "sessionId": sid, "version": "2.1.332"}));
        out.push(json!({"type": "progress", "data": {"type": "hook_progress", "hookEvent": "PostToolUse"}, "toolUseID": id, "parentToolUseID": id, "uuid": format!("p-{i}-{call}"), "sessionId": sid}));
        out.push(json!({"parentUuid": null, "isSidechain": false, "type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": file}]}, "toolUseResult": {"type": "text", "file": {"filePath": format!("src/bench_{call}.rs"), "content": file, "numLines": 45}}, "uuid": format!("r-{i}-{call}"), "sessionId": sid, "version": "2.1.332"}));
    }
    out.push(json!({"parentUuid": null, "isSidechain": false, "type": "assistant", "message": {"id": format!("msg_{i}"), "type": "message", "role": "assistant", "model": "claude-sonnet-5-5", "content": [{"type": "text", "text": format!("Fixed the schedule in turn {i}; the valves open on time now.")}], "stop_reason": "end_turn", "usage": {"input_tokens": 1200, "output_tokens": 40}}, "uuid": format!("e-{i}"), "sessionId": sid, "version": "2.1.332"}));
    out.push(json!({"type": "system", "subtype": "stop_hook_summary", "hookCount": 1, "hookInfos": [{"command": "stagegraph run context-update --inputs-json - --quiet", "durationMs": 30}], "uuid": format!("s-{i}"), "sessionId": sid}));
    out.push(json!({"type": "last-prompt", "lastPrompt": said, "sessionId": sid}));
    out.push(json!({"type": "cost-state", "sessionId": sid, "totalCostUSD": 0.01 * i as f64}));
}

impl Bench {
    fn new(bin: &Path, work: &Path, mb: usize) -> Bench {
        let project = work.join(format!("project-{mb}mb"));
        let transcript = work.join(format!("transcript-{mb}mb.jsonl"));
        fs::create_dir_all(project.join("models")).expect("a project");
        fs::write(
            project.join("models/gate.sh"),
            format!("cat > \"$(dirname \"$0\")/gate.prompt\"\nprintf '%s' '{GATE_REPLY}'\n"),
        )
        .expect("gate");
        fs::write(
            project.join("models/writer.sh"),
            format!("cat > \"$(dirname \"$0\")/writer.prompt\"\nprintf '%s' '{WRITER_REPLY}'\n"),
        )
        .expect("writer");
        fs::write(
            project.join("stagegraph.toml"),
            format!(
                "[models.haiku]\nprovider = \"command\"\ncommand = [\"sh\", \"{0}/models/gate.sh\"]\n\n[models.sonnet]\nprovider = \"command\"\ncommand = [\"sh\", \"{0}/models/writer.sh\"]\n",
                project.display()
            ),
        )
        .expect("models");
        let (lines, before_last_turn, before_tools);
        if !transcript.exists()
            || fs::metadata(&transcript).map_or(0, |m| m.len()) < (mb as u64) << 20
        {
            let mut file =
                std::io::BufWriter::new(fs::File::create(&transcript).expect("a transcript"));
            let (mut written, mut i, mut count) = (0usize, 0usize, 0usize);
            let mut batch = Vec::new();
            while written < mb << 20 {
                batch.clear();
                working_turn(i, &mut batch);
                for line in &batch {
                    let text = line.to_string();
                    written += text.len() + 1;
                    writeln!(file, "{text}").expect("write");
                    count += 1;
                }
                i += 1;
            }
            // The last turn names project terms; then tool traffic only.
            before_last_turn = count;
            let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/context-update/cli-2.1-turns.jsonl");
            for line in fs::read_to_string(fixture)
                .expect("the fixture")
                .lines()
                .take(13)
            {
                writeln!(file, "{line}").expect("write");
                count += 1;
            }
            before_tools = count;
            batch.clear();
            working_turn(i, &mut batch);
            for line in batch.iter().skip(4).take(9) {
                writeln!(file, "{line}").expect("write");
                count += 1;
            }
            file.flush().expect("flush");
            lines = count;
            fs::write(
                work.join(format!("transcript-{mb}mb.meta")),
                format!("{lines} {before_last_turn} {before_tools}"),
            )
            .expect("meta");
        } else {
            let meta =
                fs::read_to_string(work.join(format!("transcript-{mb}mb.meta"))).expect("meta");
            let v: Vec<usize> = meta
                .split_whitespace()
                .filter_map(|s| s.parse().ok())
                .collect();
            (lines, before_last_turn, before_tools) = (v[0], v[1], v[2]);
        }
        Bench {
            bin: bin.to_path_buf(),
            project,
            transcript,
            lines,
            before_last_turn,
            before_tools,
        }
    }

    fn state_home(&self) -> PathBuf {
        self.project.join("state-home")
    }

    fn prepare(&self, scenario: Scenario) {
        let rocket = self.project.join(".roc/rocket");
        let _ = fs::remove_dir_all(&rocket);
        let _ = fs::remove_dir_all(self.state_home());
        fs::create_dir_all(&rocket).expect("the rocket folder");
        let toggle = !matches!(scenario, Scenario::ToggleOff);
        fs::write(
            self.project.join("CLAUDE.md"),
            if toggle {
                "# Greenhouse\n\n- Background context: enabled\n"
            } else {
                "# Greenhouse\n"
            },
        )
        .expect("CLAUDE.md");
        let cursor = match scenario {
            Scenario::ToolOnly => Some(self.before_tools),
            Scenario::FullFire | Scenario::Debounced | Scenario::ToggleOff => {
                Some(self.before_last_turn)
            }
            Scenario::FirstFire => None,
        };
        if let Some(line) = cursor {
            let path = self.transcript.display().to_string();
            let value = json!({"last_processed_line": line, "transcript_path": path, "updated_at": "2026-12-01T09:00:00Z",
                "transcripts": {path.clone(): {"last_processed_line": line, "updated_at": "2026-12-01T09:00:00Z"}}});
            fs::write(rocket.join("context-gate-state.json"), value.to_string()).expect("cursor");
        }
        if matches!(scenario, Scenario::Debounced) {
            let state = self
                .state_home()
                .join("stagegraph")
                .join(stagegraph::StateDir::project_key(&self.project))
                .join("state");
            fs::create_dir_all(&state).expect("state");
            let recent = (chrono::Utc::now() - chrono::Duration::seconds(60)).to_rfc3339();
            fs::write(
                state.join("context-update.json"),
                json!({"last_update": recent}).to_string(),
            )
            .expect("state");
        }
    }

    fn fire(&self, extra: &[&str]) -> Duration {
        let payload = json!({"session_id": "bench", "transcript_path": self.transcript, "cwd": self.project, "hook_event_name": "Stop", "stop_hook_active": false});
        let started = Instant::now();
        let mut child = Command::new(&self.bin)
            .args(["run", "context-update", "--inputs-json", "-", "--quiet"])
            .args(extra)
            .current_dir(&self.project)
            .env("CLAUDE_PROJECT_DIR", &self.project)
            .env("XDG_STATE_HOME", self.state_home())
            .env_remove("ROCKET_CONTEXT_UPDATE_INVOKED")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start stagegraph");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(payload.to_string().as_bytes())
            .expect("payload");
        let status = child.wait().expect("wait");
        let elapsed = started.elapsed();
        assert!(status.success());
        elapsed
    }

    fn median_ms(&self, scenario: Scenario, runs: usize) -> f64 {
        let mut times: Vec<f64> = (0..runs.max(1))
            .map(|_| {
                self.prepare(scenario);
                self.fire(&["--input", "min_words=10"]).as_secs_f64() * 1000.0
            })
            .collect();
        times.sort_by(|a, b| a.partial_cmp(b).expect("a time"));
        times[times.len() / 2]
    }

    fn full_fire_bytes(&self) -> (usize, usize) {
        self.prepare(Scenario::FullFire);
        let _ = fs::remove_file(self.project.join("models/gate.prompt"));
        let _ = fs::remove_file(self.project.join("models/writer.prompt"));
        self.fire(&["--input", "min_words=10"]);
        let size = |name: &str| {
            fs::metadata(self.project.join("models").join(name)).map_or(0, |m| m.len() as usize)
        };
        (size("gate.prompt"), size("writer.prompt"))
    }

    /// v1: the writer's prompt and the last 500 lines of the transcript.
    fn v1_bytes(&self) -> usize {
        v1_bytes_of(&fs::read_to_string(&self.transcript).expect("the transcript"))
    }

    /// Each turn of a session fired as a hook: (gate bytes, writer bytes, v1 bytes).
    fn replay_turns(bin: &Path, work: &Path, session: &Path) -> Vec<(usize, usize, usize)> {
        let bench = Bench::new(bin, work, 0);
        let text = fs::read_to_string(session).expect("the session transcript");
        let all: Vec<&str> = text.lines().collect();
        let ends: Vec<usize> = all
            .iter()
            .enumerate()
            .filter(|(_, l)| l.contains("\"stop_hook_summary\""))
            .map(|(i, _)| i)
            .collect();
        bench.prepare(Scenario::FirstFire);
        let mut out = Vec::new();
        for end in &ends {
            let cut = all[..*end].join("\n") + "\n";
            fs::write(&bench.transcript, &cut).expect("the transcript so far");
            for name in ["gate.prompt", "writer.prompt"] {
                let _ = fs::remove_file(bench.project.join("models").join(name));
            }
            bench.fire(&["--input", "debounce_seconds=0"]);
            let size = |name: &str| {
                fs::metadata(bench.project.join("models").join(name))
                    .map_or(0, |m| m.len() as usize)
            };
            out.push((
                size("gate.prompt"),
                size("writer.prompt"),
                v1_bytes_of(&cut),
            ));
        }
        out
    }
}

fn v1_bytes_of(transcript: &str) -> usize {
    let lines: Vec<&str> = transcript.lines().collect();
    let tail = &lines[lines.len().saturating_sub(500)..];
    V1_PROMPT.len() + tail.iter().map(|line| line.len() + 1).sum::<usize>()
}
