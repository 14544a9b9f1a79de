//! Libraries and the search path: where workflows, templates and schemas are found.
//!
//! A library is a folder holding `workflows/`, `templates/` and `schemas/`; the built-in library
//! is embedded in the binary. The search path is, first match first: `--library` folders,
//! `STAGEGRAPH_PATH`, `.stagegraph/` at the project root, the project root itself (its
//! `workflows/` folder and the workflow files at its top), the user's config folder, the
//! built-in library.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use include_dir::{include_dir, Dir};
use sha2::{Digest, Sha256};

use crate::diag::SourceFile;

static BUILTIN_WORKFLOWS: Dir = include_dir!("$CARGO_MANIFEST_DIR/workflows");
static BUILTIN_TEMPLATES: Dir = include_dir!("$CARGO_MANIFEST_DIR/templates");
static BUILTIN_SCHEMAS: Dir = include_dir!("$CARGO_MANIFEST_DIR/schemas");

/// The three kinds of file a library holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shelf {
    Workflows,
    Templates,
    Schemas,
}

impl Shelf {
    pub(crate) fn folder(self) -> &'static str {
        match self {
            Shelf::Workflows => "workflows",
            Shelf::Templates => "templates",
            Shelf::Schemas => "schemas",
        }
    }

    fn builtin(self) -> &'static Dir<'static> {
        match self {
            Shelf::Workflows => &BUILTIN_WORKFLOWS,
            Shelf::Templates => &BUILTIN_TEMPLATES,
            Shelf::Schemas => &BUILTIN_SCHEMAS,
        }
    }
}

/// One library on the search path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Library {
    /// The folder, or `None` for the built-in library.
    pub root: Option<PathBuf>,
    /// Why it is on the path (`--library`, `STAGEGRAPH_PATH`, `project`, `root`, `user`,
    /// `built-in`).
    pub origin: &'static str,
    /// Workflow files at the folder's top count too, beside those of its `workflows/` (the
    /// project root: `hello.toml` beside `stagegraph.toml`).
    pub loose: bool,
}

impl Library {
    pub(crate) fn builtin() -> Self {
        Library {
            root: None,
            origin: "built-in",
            loose: false,
        }
    }

    pub(crate) fn dir(root: impl Into<PathBuf>, origin: &'static str) -> Self {
        Library {
            root: Some(root.into()),
            origin,
            loose: false,
        }
    }

    /// The project root as a library: its `workflows/`, templates and schemas, and the
    /// workflow files at its top.
    pub(crate) fn project_root(root: impl Into<PathBuf>) -> Self {
        Library {
            root: Some(root.into()),
            origin: "root",
            loose: true,
        }
    }

    /// How the library is shown to users.
    pub(crate) fn display(&self) -> String {
        match &self.root {
            Some(root) => root.display().to_string(),
            None => "<built-in>".to_string(),
        }
    }

    /// A file of this library, read.
    pub(crate) fn read(&self, shelf: Shelf, relative: &str) -> Option<SourceFile> {
        if relative.split('/').any(|part| part == "..") {
            return None;
        }
        match &self.root {
            Some(root) => {
                let path = root.join(shelf.folder()).join(relative);
                match std::fs::read_to_string(&path) {
                    Ok(text) => Some(SourceFile::new(path, text)),
                    Err(_) if self.loose && shelf == Shelf::Workflows => {
                        let path = root.join(relative);
                        let is_loose = !relative.contains('/') && workflow_name(relative).is_some();
                        let text = std::fs::read_to_string(&path).ok()?;
                        (is_loose && is_workflow_text(&text)).then(|| SourceFile::new(path, text))
                    }
                    Err(_) => None,
                }
            }
            None => {
                let file = shelf.builtin().get_file(relative)?;
                let text = file.contents_utf8()?;
                Some(SourceFile::new(
                    format!("<built-in>/{}/{relative}", shelf.folder()),
                    text,
                ))
            }
        }
    }

    /// The workflow names this library holds, sorted.
    pub(crate) fn workflow_names(&self) -> Vec<String> {
        let mut names: Vec<String> = match &self.root {
            Some(root) => {
                let mut names: Vec<String> = std::fs::read_dir(root.join("workflows"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|entry| workflow_name(&entry.file_name().to_string_lossy()))
                    .collect();
                if self.loose {
                    names.extend(loose_workflows(root));
                }
                names
            }
            None => BUILTIN_WORKFLOWS
                .files()
                .filter_map(|f| workflow_name(&f.path().file_name()?.to_string_lossy()))
                .collect(),
        };
        names.sort();
        names.dedup();
        names
    }

    /// Every file of a shelf, as relative paths (for `eject`).
    pub(crate) fn files(&self, shelf: Shelf, prefix: &str) -> Vec<String> {
        let mut out = Vec::new();
        match &self.root {
            Some(root) => {
                let base = root.join(shelf.folder());
                for entry in walkdir::WalkDir::new(base.join(prefix))
                    .into_iter()
                    .flatten()
                {
                    if entry.file_type().is_file() {
                        if let Ok(rel) = entry.path().strip_prefix(&base) {
                            out.push(rel.to_string_lossy().to_string());
                        }
                    }
                }
            }
            None => collect_embedded(shelf.builtin(), prefix, &mut out),
        }
        out.sort();
        out
    }
}

/// The workflow a file of `workflows/` holds: `x.toml` holds `x`; a test file (`x.test.toml`)
/// and the model configuration (`stagegraph.toml`) hold none.
fn workflow_name(file: &str) -> Option<String> {
    if file.ends_with(crate::testing::TEST_SUFFIX) || file == crate::project::CONFIG_FILE {
        return None;
    }
    file.strip_suffix(".toml").map(str::to_string)
}

/// Whether a TOML file at a project's top is a workflow rather than another tool's
/// configuration (`Cargo.toml`, `pyproject.toml`): it has a `[workflow]` or a `[stages]` table.
fn is_workflow_text(text: &str) -> bool {
    match text.parse::<toml::Table>() {
        Ok(table) => table
            .get("stages")
            .or_else(|| table.get("workflow"))
            .is_some_and(toml::Value::is_table),
        // A workflow with a syntax error is still the user's workflow, to be told about.
        Err(_) => text.lines().any(|line| {
            let line = line.trim_start();
            line.starts_with("[workflow]") || line.starts_with("[stages")
        }),
    }
}

/// The names of the workflow files at the top of `root`.
fn loose_workflows(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .filter_map(|entry| {
            let name = workflow_name(&entry.file_name().to_string_lossy())?;
            let text = std::fs::read_to_string(entry.path()).ok()?;
            is_workflow_text(&text).then_some(name)
        })
        .collect()
}

fn collect_embedded(dir: &Dir<'_>, prefix: &str, out: &mut Vec<String>) {
    for file in dir.files() {
        let path = file.path().to_string_lossy().to_string();
        if path.starts_with(prefix) {
            out.push(path);
        }
    }
    for sub in dir.dirs() {
        collect_embedded(sub, prefix, out);
    }
}

/// The ordered list of libraries.
#[derive(Debug, Clone)]
pub(crate) struct SearchPath {
    pub libraries: Vec<Library>,
    /// While set and holding a list, every lookup made through this path (and its clones) is
    /// written to it with what it found: the files a check read (see `check::kept`).
    witness: Option<Witness>,
}

/// The lookups made through a witnessed [`SearchPath`], each with the file it found.
pub(crate) type Witness = Arc<Mutex<Option<Vec<(Lookup, Option<Seen>)>>>>;

/// One lookup of a [`SearchPath`]: asked again, it must find the same file with the same text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// A workflow named by its path.
    Path(PathBuf),
    /// A workflow by name, from a position on the path.
    Workflow { name: String, start: usize },
    /// A template or schema of library `own`.
    File {
        own: Library,
        shelf: Shelf,
        relative: String,
    },
}

/// What a lookup found: the file's path and the SHA-256 of its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub path: PathBuf,
    pub sha256: [u8; 32],
}

impl Seen {
    pub(crate) fn of(source: &SourceFile) -> Seen {
        Seen {
            path: source.path.clone(),
            sha256: Sha256::digest(source.text.as_bytes()).into(),
        }
    }
}

/// Where a workflow was found.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub library: Library,
    /// Index on the search path, or `None` for a workflow named by its path.
    pub position: Option<usize>,
    pub source: SourceFile,
}

impl SearchPath {
    /// The search path of the spec, from the command line's `--library` folders, the
    /// environment and the working directory.
    pub(crate) fn from_env(cli: &[PathBuf], cwd: &Path, root: &Path) -> Self {
        let mut libraries: Vec<Library> = cli
            .iter()
            .map(|dir| Library::dir(cwd.join(dir), "--library"))
            .collect();
        if let Ok(path) = std::env::var("STAGEGRAPH_PATH") {
            libraries.extend(
                path.split(':')
                    .filter(|p| !p.is_empty())
                    .map(|p| Library::dir(cwd.join(p), "STAGEGRAPH_PATH")),
            );
        }
        libraries.push(Library::dir(
            root.join(crate::project::STATE_FOLDER),
            "project",
        ));
        libraries.push(Library::project_root(root));
        if let Some(config) = user_config_dir() {
            libraries.push(Library::dir(config.join("stagegraph"), "user"));
        }
        libraries.push(Library::builtin());
        SearchPath::new(libraries)
    }

    /// Only the given libraries (tests, embedding).
    pub(crate) fn new(libraries: Vec<Library>) -> Self {
        SearchPath {
            libraries,
            witness: None,
        }
    }

    /// The same path, writing each lookup made through it (or a clone) to the list it gives,
    /// until the list is taken out of it.
    pub(crate) fn witnessed(&self) -> (SearchPath, Witness) {
        let witness: Witness = Arc::new(Mutex::new(Some(Vec::new())));
        let search = SearchPath {
            libraries: self.libraries.clone(),
            witness: Some(Arc::clone(&witness)),
        };
        (search, witness)
    }

    fn saw(&self, lookup: impl FnOnce() -> Lookup, found: Option<&SourceFile>) {
        if let Some(witness) = &self.witness {
            let mut list = witness
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(list) = list.as_mut() {
                list.push((lookup(), found.map(Seen::of)));
            }
        }
    }

    /// The lookup made again: the file it finds now, if any.
    pub(crate) fn again(&self, lookup: &Lookup) -> Option<SourceFile> {
        match lookup {
            Lookup::Path(path) => workflow_at_path(path).map(|found| found.source),
            Lookup::Workflow { name, start } => self
                .find_workflow_from(name, *start)
                .map(|found| found.source),
            Lookup::File {
                own,
                shelf,
                relative,
            } => self.find_file(own, *shelf, relative),
        }
    }

    /// A workflow by name (first match) or by path (ending in `.toml`).
    pub(crate) fn find_workflow(&self, reference: &str, cwd: &Path) -> Option<Found> {
        if reference.ends_with(".toml") {
            let path = cwd.join(reference);
            let found = workflow_at_path(&path);
            self.saw(|| Lookup::Path(path), found.as_ref().map(|f| &f.source));
            return found;
        }
        self.find_workflow_from(reference, 0)
    }

    /// The first workflow of that name at or after `start` on the path.
    pub(crate) fn find_workflow_from(&self, name: &str, start: usize) -> Option<Found> {
        let found = self.first_workflow_from(name, start);
        self.saw(
            || Lookup::Workflow {
                name: name.to_string(),
                start,
            },
            found.as_ref().map(|f| &f.source),
        );
        found
    }

    fn first_workflow_from(&self, name: &str, start: usize) -> Option<Found> {
        let file = format!("{name}.toml");
        self.libraries
            .iter()
            .enumerate()
            .skip(start)
            .find_map(|(position, library)| {
                library.read(Shelf::Workflows, &file).map(|source| Found {
                    library: library.clone(),
                    position: Some(position),
                    source,
                })
            })
    }

    /// A template or schema named by a workflow of library `own`.
    ///
    /// Libraries higher on the search path than the workflow's own come first, so a project can
    /// override one template of a shipped workflow with a file in `.stagegraph/templates/`;
    /// then the workflow's own library, so its files win over those of libraries below it. A
    /// workflow named by its path (not on the search path) looks in its own library first.
    pub(crate) fn find_file(
        &self,
        own: &Library,
        shelf: Shelf,
        relative: &str,
    ) -> Option<SourceFile> {
        let found = self.first_file(own, shelf, relative);
        self.saw(
            || Lookup::File {
                own: own.clone(),
                shelf,
                relative: relative.to_string(),
            },
            found.as_ref(),
        );
        found
    }

    fn first_file(&self, own: &Library, shelf: Shelf, relative: &str) -> Option<SourceFile> {
        if !self.libraries.contains(own) {
            if let Some(found) = own.read(shelf, relative) {
                return Some(found);
            }
        }
        self.libraries
            .iter()
            .find_map(|library| library.read(shelf, relative))
    }

    /// Every workflow name on the path, each with the library it resolves to.
    pub(crate) fn workflows(&self) -> Vec<(String, Library, Vec<Library>)> {
        let mut out: Vec<(String, Library, Vec<Library>)> = Vec::new();
        for library in &self.libraries {
            for name in library.workflow_names() {
                match out.iter_mut().find(|(n, _, _)| *n == name) {
                    Some((_, _, shadowed)) => shadowed.push(library.clone()),
                    None => out.push((name, library.clone(), Vec::new())),
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Names a typo might have meant.
    pub(crate) fn workflow_names(&self) -> Vec<String> {
        self.workflows()
            .into_iter()
            .map(|(name, _, _)| name)
            .collect()
    }
}

fn workflow_at_path(path: &Path) -> Option<Found> {
    let text = std::fs::read_to_string(path).ok()?;
    let parent = path.parent().unwrap_or(Path::new("."));
    let root = if parent.file_name().is_some_and(|n| n == "workflows") {
        parent.parent().unwrap_or(Path::new(".")).to_path_buf()
    } else {
        parent.to_path_buf()
    };
    Some(Found {
        library: Library::dir(root, "file"),
        position: None,
        source: SourceFile::new(path, text),
    })
}

/// `$XDG_CONFIG_HOME`, or `~/.config`.
pub(crate) fn user_config_dir() -> Option<PathBuf> {
    match std::env::var_os("XDG_CONFIG_HOME") {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")),
    }
}
