//! A sandbox for the built-ins' tests: a temporary folder holding the run's working
//! directory `work/`, whose write root is `work/out/`, and `outside/`, which no root covers.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::builtins::{Builtin, BuiltinCtx, BuiltinResult, WriteRoots};

pub(crate) struct Sandbox {
    _dir: tempfile::TempDir,
    pub(crate) cwd: PathBuf,
    pub(crate) outside: PathBuf,
    writes: WriteRoots,
    locks: crate::floor::locks::HeldLocks,
}

impl Sandbox {
    pub(crate) fn new() -> Self {
        Self::with_roots(&["out"])
    }

    pub(crate) fn with_roots(roots: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical temp dir");
        let cwd = base.join("work");
        let outside = base.join("outside");
        std::fs::create_dir_all(&cwd).expect("work dir");
        std::fs::create_dir_all(&outside).expect("outside dir");
        let roots: Vec<String> = roots.iter().map(std::string::ToString::to_string).collect();
        let writes = WriteRoots::new(&cwd, &roots);
        Sandbox {
            _dir: dir,
            cwd,
            outside,
            writes,
            locks: Default::default(),
        }
    }

    pub(crate) fn path(&self, relative: &str) -> PathBuf {
        self.cwd.join(relative)
    }

    pub(crate) fn ctx(&self) -> BuiltinCtx<'_> {
        BuiltinCtx {
            cwd: &self.cwd,
            writes: &self.writes,
            locks: &self.locks,
            cancel: crate::builtins::Cancel::default(),
            max_output: u64::MAX,
        }
    }

    /// Run a built-in, asserting that `with` validates against its `with` schema and that a
    /// successful output validates against its output schema.
    pub(crate) fn call(&self, name: &str, with: Value) -> BuiltinResult {
        let builtin = find(name);
        assert_valid(&(builtin.with_schema)(), &with, &format!("{name} with"));
        let output = (builtin.run)(&with, &self.ctx());
        if let Ok(value) = &output {
            assert_valid(&(builtin.output_schema)(), value, &format!("{name} output"));
        }
        output
    }
}

/// A registered built-in, by name.
pub(crate) fn find(name: &str) -> &'static Builtin {
    crate::builtins::lookup(name).unwrap_or_else(|| panic!("no built-in {name}"))
}

pub(crate) fn assert_valid(schema: &Value, instance: &Value, what: &str) {
    jsonschema::meta::validate(schema)
        .unwrap_or_else(|err| panic!("{what}: schema is not valid: {err}"));
    let validator = jsonschema::validator_for(schema).expect("compiled schema");
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|err| err.to_string())
        .collect();
    assert!(errors.is_empty(), "{what}: {instance} fails: {errors:?}");
}

pub(crate) fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("parent dirs");
    std::fs::write(path, text).expect("write fixture");
}

/// The names in a folder, sorted.
pub(crate) fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}
